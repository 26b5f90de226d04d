"""The transports, by the name a kind gives (kinds.base.Kind.transport), and the set a process opens.

A process that sends (a worker, a test message) makes one transport of each name the
kinds use, opens them together and sends each delivery through its kind's
(delivery.receivers.protocol). A new transport is one module in this wing and one line
in TRANSPORTS; a kind naming a transport missing here stops a worker at its start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from delivery.receivers.addresses import ReceiverPolicy
from delivery.receivers.protocol import Transport
from delivery.receivers.smtp import SmtpTransport
from delivery.receivers.transport import WebhookTransport
from kinds import KINDS

# Each transport's maker: the timeout a send uses when its settings say none, and the receiver
# policy its connections are screened by (None: the settings').
TRANSPORTS: Mapping[str, Callable[..., Transport]] = {"http": WebhookTransport, "smtp": SmtpTransport}


def transports_make(*, timeout: float, policy: ReceiverPolicy | None = None) -> dict[str, Transport]:
    """One transport, not yet open, for each name the kinds (kinds.KINDS) use."""
    return {
        name: TRANSPORTS[name](timeout=timeout, policy=policy)
        for name in sorted({kind.transport for kind in KINDS.values()})
    }
