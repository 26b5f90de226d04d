"""An operator's test message: one signed ping to a destination, sent at once, its answer shown.

The ping goes out as a delivery would, through its kind's transport
(delivery.receivers.protocol: the destination's format, the Standard Webhooks headers
signed with every secret in force, its timeout, the same refusal of addresses
behind us checked on the address connected to), but it is not one: no Delivery or attempt row, no metric, no
change to the endpoint's health. It is sent whether the destination is enabled,
paused or failing: seeing what the receiver answers is the point.

The caller (a web request) waits for the answer, at most the destination's
timeout, and never longer than LONGEST_WAIT. No transaction or row lock is held
meanwhile: the destination and its secrets are read first, then the requests go.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.utils import timezone

from delivery.actions.relays import relay_for_sending
from delivery.destinations.selectors import destination_signing_secrets
from delivery.models import AttemptOutcome, Destination
from delivery.receivers.lane_settings import LaneSettings, lane_settings
from delivery.receivers.protocol import ClaimedDelivery, SendResult, Transport
from delivery.receivers.transports import transports_make
from delivery.rules.answers import Signal
from kinds import kind_for

logger = logging.getLogger(__name__)

# The event type a test message carries, which no occurrence ever has.
TEST_EVENT_TYPE = "destination.test"
# How much of the receiver's answer is shown.
BODY_START_BYTES = 500
# A web request waits no longer, whatever the timeout: under gunicorn's --timeout (30 s, deploy/),
# which would kill the web worker mid-request.
LONGEST_WAIT = 25.0


@dataclass(frozen=True)
class PingResult:
    """What the receiver answered a test message, or why none was sent or answered."""

    destination: Destination
    message_id: str
    # None: no answer (refused, timed out, unreachable): `error` says which.
    status_code: int | None
    # The receiver accepted it (2xx), as a delivery would count as delivered.
    ok: bool
    latency_ms: int
    body_start: str
    error: str
    # No request was made: the destination's address is refused (delivery.receivers.addresses).
    refused: bool

    def describe(self) -> str:
        """One line for an operator: the answer, its latency and the first bytes of its body."""
        if self.status_code is None:
            return self.error if self.refused else f"{self.error} ({self.latency_ms} ms)"
        answer = f"HTTP {self.status_code}" + (f" ({self.error})" if self.error else "")
        return f"{answer} in {self.latency_ms} ms" + (
            f"; answer: {self.body_start}" if self.body_start else ""
        )


def destination_send_test(*, destination: Destination, operator: str) -> PingResult:
    """Send a test message to `destination` now and return its answer."""
    return destinations_send_test(destinations=[destination], operator=operator)[0]


def destinations_send_test(*, destinations: Sequence[Destination], operator: str) -> list[PingResult]:
    """Send a test message to each of `destinations` at once (side by side: the wait is the longest one's)."""
    if not destinations:
        return []
    now = timezone.now()
    secrets = destination_signing_secrets(destinations=destinations, now=now)
    pings = [_ping(destination=d, sent_at=now.isoformat()) for d in destinations]
    settings = [_settings(destination=d, secrets=secrets[d.pk]) for d in destinations]
    urls = [d.receiver_url() for d in destinations]
    sent = asyncio.run(_send_all(pings, urls=urls, settings=settings))
    results = [_result(destination=d, sent=s) for d, s in zip(destinations, sent, strict=True)]
    for result in results:
        logger.info(
            "Test message to destination %s sent by %s: %s",
            result.destination.name,
            operator,
            result.status_code if result.status_code is not None else result.error,
            extra={
                "destination": result.destination.name,
                "destination_id": result.destination.pk,
                "operator": operator,
                "message_id": result.message_id,
                "status_code": result.status_code,
                "latency_ms": result.latency_ms,
                "refused": result.refused,
            },
        )
    return results


def _settings(*, destination: Destination, secrets: Sequence[str]) -> LaneSettings:
    """The destination's settings as a worker's lane has them (its defaults decided in one place), the wait
    cut to LONGEST_WAIT."""
    settings = lane_settings(
        format=destination.format,
        timeout=destination.timeout,
        secrets=secrets,
        relay=relay_for_sending(destination=destination),
    )
    return replace(settings, timeout=min(settings.timeout, LONGEST_WAIT))


def _ping(*, destination: Destination, sent_at: str) -> ClaimedDelivery:
    """The test message as the transport sends a claimed delivery, with a message id of its own."""
    message_id = f"test-{uuid.uuid4().hex}"
    payload = {
        # Who sent it stays in our log: the receiver may be a chat channel outside the company.
        "message": f'Test message from the birthday scheduler to the destination "{destination.name}": '
        "nobody is being greeted.",
        "event_type": TEST_EVENT_TYPE,
        "test": True,
        "destination": destination.name,
        "sent_at": sent_at,
    }
    return ClaimedDelivery(
        id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        idempotency_key=message_id,
        endpoint_key=destination.url_key,
        body=json.dumps(kind_for(destination.format).body(payload)),
        attempt=1,
        max_attempts=1,
    )


async def _send_all(
    pings: Sequence[ClaimedDelivery], *, urls: Sequence[str], settings: Sequence[LaneSettings]
) -> list[SendResult]:
    transports = transports_make(timeout=max(s.timeout for s in settings))
    for transport in transports.values():
        await transport.open()
    try:
        return list(
            await asyncio.gather(
                *(
                    _send(transports[s.channel.transport], ping, url=u, settings=s)
                    for ping, u, s in zip(pings, urls, settings, strict=True)
                )
            )
        )
    finally:
        for transport in transports.values():
            await transport.close()


async def _send(
    transport: Transport, ping: ClaimedDelivery, *, url: str, settings: LaneSettings
) -> SendResult:
    # The transport's deadlines are per step (connect, each read), as a worker needs; a person waiting
    # for a page needs one for the whole request, DNS included.
    started_at, started_mono = timezone.now(), time.monotonic()
    try:
        async with asyncio.timeout(settings.timeout):
            return await transport.send(ping, url=url, settings=settings)
    except TimeoutError:
        return SendResult(
            delivery=ping,
            outcome=AttemptOutcome.TRANSIENT_FAILURE,
            signal=Signal.FAILURE,
            started_at=started_at,
            finished_at=timezone.now(),
            duration_ms=int((time.monotonic() - started_mono) * 1000),
            error=f"Timed out after {settings.timeout:g} s",
        )


def _result(*, destination: Destination, sent: SendResult) -> PingResult:
    # Cut at a byte count, then decoded again: a character cut in half is dropped, not shown as garbage.
    body_start = sent.response_excerpt.encode()[:BODY_START_BYTES].decode("utf-8", errors="ignore")
    return PingResult(
        destination=destination,
        message_id=sent.delivery.idempotency_key,
        status_code=sent.status_code,
        ok=sent.outcome == AttemptOutcome.DELIVERED,
        latency_ms=sent.duration_ms,
        body_start=body_start,
        # Shown to the operator, never stored: a test message names no one, so its answer is shown whole.
        error=sent.detail or sent.error,
        refused=sent.refused,
    )
