"""A destination's settings as a worker's lane sees them: one immutable value, each default decided here once.

A lane is given a new `LaneSettings` at every refresh of the destinations (once
a second) and replaces its old one whole, so a request never sees half an
operator's edit (a new rate with the old timeout) and nothing else in the
worker decides what an unset max rate or timeout means.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings

from delivery.models import DestinationFormat
from delivery.receivers.signing import WebhookSigner
from kinds import Kind, kind_for


@dataclass(frozen=True)
class Relay:
    """What an email destination's SMTP transport needs besides the relay's URL (host, port, TLS)."""

    destination_id: int
    # Names the List-Id (header-safe by the transport).
    destination_name: str
    from_address: str
    from_name: str = ""
    reply_to: str = ""
    # The fixed addresses of a destination that is not personal (an HR mailbox).
    to: tuple[str, ...] = ()
    username: str = ""
    # Decrypted from Destination.smtp_password_ciphertext once per refresh: a credential, never logged.
    password: str = field(default="", repr=False)
    # An outcome unknown (no reply after the final dot) is sent again under the same Message-ID; False: given up.
    resend_unknown: bool = True
    # The one-click unsubscribe URL of a person (by their id) from this destination (delivery.actions.relays):
    # RFC 8058's List-Unsubscribe. None: none. Not compared: a lane keeps settings equal in all else.
    unsubscribe: Callable[[str], str] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class LaneSettings:
    """What a lane obeys of its destination: every limit a number, every default already applied."""

    # Most requests a second from the fleet (delivery.rules.pace); 0: no cap.
    max_rate: float
    # Most requests open at once from the fleet; 0: no cap.
    max_in_flight: int
    # Seconds to wait for the receiver (connect, then each read).
    timeout: float
    # The destination's current signing secrets, newest first; none: unsigned.
    signing_secrets: tuple[str, ...] = ()
    # The destination's kind (kinds/): its answers are read by it.
    channel: Kind = kind_for(DestinationFormat.STANDARD)
    # An email destination's relay settings besides its URL (delivery.receivers.smtp); None for any other kind.
    relay: Relay | None = None

    @functools.cached_property
    def signer(self) -> WebhookSigner | None:
        """The signer of these secrets, made once per settings value (a lane keeps an equal value it is given)."""
        return WebhookSigner(self.signing_secrets) if self.signing_secrets else None


def lane_settings(
    *,
    format: str = DestinationFormat.STANDARD,
    max_rate: float | None = None,
    max_in_flight: int | None = None,
    timeout: timedelta | None = None,
    secrets: Sequence[str] = (),
    relay: Relay | None = None,
) -> LaneSettings:
    """The settings of a destination in `format` with these of its own (None: unset); the only place defaults are decided.

    Unset, the fleet's settings apply: WEBHOOK_MAX_RATE, WEBHOOK_MAX_IN_FLIGHT,
    WEBHOOK_TIMEOUT. A lane with no destination (what it holds was queued for
    a URL since edited) takes them all. Without a max rate of its own, a
    destination of a chat kind keeps to its service's published pace
    (kinds/), unless WEBHOOK_MAX_RATE is lower.
    """
    channel = kind_for(format)
    if max_rate is None:
        fleet = settings.WEBHOOK_MAX_RATE
        pace = channel.pace
        max_rate = fleet if pace is None else (min(fleet, pace) if fleet else pace)
    return LaneSettings(
        max_rate=max_rate,
        max_in_flight=max_in_flight if max_in_flight is not None else settings.WEBHOOK_MAX_IN_FLIGHT,
        timeout=(timeout or settings.WEBHOOK_TIMEOUT).total_seconds(),
        signing_secrets=tuple(secrets),
        channel=channel,
        relay=relay,
    )
