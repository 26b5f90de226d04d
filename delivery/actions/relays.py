"""An email destination's relay settings as a sender needs them: with its one-click unsubscribe URLs.

The transport (delivery.receivers.smtp) puts RFC 8058's List-Unsubscribe on every message
to a person; the URL is signed per person and destination (delivery.actions.optouts), which
the transport, beneath this wing, cannot reach: it is handed the maker with the relay.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import replace

from delivery.actions.optouts import unsubscribe_url
from delivery.destinations.selectors import destination_relay
from delivery.models import Destination
from delivery.receivers.lane_settings import Relay


def relay_for_sending(*, destination: Destination) -> Relay | None:
    """The destination's relay settings (None for a kind that is not email), making its unsubscribe URLs."""
    relay = destination_relay(destination=destination)
    if relay is None:
        return None
    return replace(relay, unsubscribe=functools.partial(_unsubscribe_url, destination_id=destination.pk))


def _unsubscribe_url(user_id: str, *, destination_id: int) -> str:
    """unsubscribe_url for a person's id as the transport holds it (a string)."""
    return unsubscribe_url(user_id=uuid.UUID(user_id), destination_id=destination_id)
