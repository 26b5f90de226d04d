"""The transport protocol: what the worker's sender speaks to every transport, and the answer it gets back.

A kind of destination names its transport (kinds.base.Kind.transport: "http" for
every kind today); delivery.receivers.transports makes one transport of each name a
process needs. A transport (`Transport`) does three things, on the event loop it
was opened on:

- `open()`: make what its sends share (the HTTP transport's sessions and
  screening resolver); it need not connect to anyone yet;
- `send(delivery, url=..., settings=...)`: send one delivery to the receiver at
  `url` (the lane's address, decrypted: a credential, never logged), as its
  destination's `settings` say (delivery.receivers.lane_settings: the kind that
  shapes and reads it, its signer, its timeout), and return one `SendResult`.
  What the receiver or the way to it did is an answer, never an exception;
- `close()`: release what `open` made.

The answer is transport-neutral. A transport reads what it got (an HTTP status and
body, later an SMTP reply at some step of a session) into one of the kinds' five
verdicts (kinds.base.Verdict: delivered, retry later with a delay, refused for
good, the receiver gone, outcome unknown), and says what the answer tells of the
receiver as a `Signal` (delivery.rules.answers). Everything above reads those two
and never an HTTP status: the lanes learn their limit and rate from the signal,
the record writes the outcome and weighs the endpoint's health by the signals
(delivery.rules.health), the retry policy decides from both
(delivery.rules.retry). So lanes, the fleet's caps and pace, leases, retries,
recovery and the test message work for any transport that keeps to this.

Two rules every transport keeps, as the HTTP one does:

- it connects only to addresses the receiver policy allows
  (delivery.receivers.addresses), checked after DNS on the address it connects
  to; a refused address is an answer (`refused`), made without a request;
- what the receiver wrote (which may echo the message, and so a name) goes only
  into `detail` and `response_excerpt`, which only the attempt's row keeps and an
  erase strips; `error` and `describe()` are in our words.

Non-HTTP transports build their answer with `answered`; the HTTP transport fills the
same fields in its own hot path (delivery.receivers.transport).
"""

from __future__ import annotations

import functools
import http
import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple, Protocol

from delivery.models import AttemptOutcome
from delivery.receivers.lane_settings import LaneSettings
from delivery.rules.answers import Signal, verdict_signal
from kinds import Reading, Verdict


class ClaimedDelivery(NamedTuple):
    """What a worker needs to send one delivery, read while claiming it.

    A named tuple: immutable, and made in one step where a frozen dataclass sets
    each field through object.__setattr__; a claim makes one per row.
    """

    id: uuid.UUID
    # None for a daily digest's delivery (delivery.dispatch.digests), which names no one event.
    event_id: uuid.UUID | None
    idempotency_key: str
    # The endpoint it goes to (Endpoint.key); the URL itself is the lane's (delivery.worker.lanes).
    endpoint_key: str
    # The body as stored, the kind's JSON (sent as it is: no decoding and encoding again).
    body: str
    attempt: int
    max_attempts: int
    # When it was due: a delivery handed back unsent keeps its place in the due order.
    due_at: datetime | None = None
    # When it was queued (or an operator queued it again): EVENT_MAX_LATENESS counts from here.
    queued_at: datetime | None = None
    # The one attempt a FAILING endpoint lets through (delivery.rules.health).
    probe: bool = False

    @property
    def user_id(self) -> str | None:
        """For log lines only: read from the body, which names the recipient."""
        try:
            return json.loads(self.body).get("user_id")
        except (ValueError, AttributeError):
            return None


@dataclass
class SendResult:
    """One attempt's outcome, in the protocol's terms.

    What the receiver said in its own words (its reason phrase, its body, an
    error text that quotes its bytes) may echo the message, and so the
    recipient's name: it is in `detail` and `response_excerpt`, which go only
    on the attempt's row, the one record a recipient's erase strips
    (delivery.erasure). `error` and `describe()` are in our words
    and name no one: the delivery's and the endpoint's last error, the log
    lines, the event's failure reason; written after an erase too (a lease
    lost mid-request), they carry nothing of the person.
    """

    delivery: ClaimedDelivery
    # The verdict as the attempt's row records it (OUTCOME_OF).
    outcome: AttemptOutcome
    # What the answer says of the receiver (its endpoint), as the lanes, the health and the retries read it.
    signal: Signal
    started_at: datetime
    finished_at: datetime
    duration_ms: int
    # The receiver's answer as an HTTP status (the attempt's `status_code`); None for no answer, or a
    # transport whose answers are not HTTP statuses (it says what happened in `error`).
    status_code: int | None = None
    # Without an answer: what went wrong, in our words (a timeout, a connection error's class).
    error: str = ""
    # The receiver's or the connection's own words: the reason phrase, an exception's text.
    detail: str = ""
    response_excerpt: str = ""
    retry_after: float | None = None
    # When the request started by this process's monotonic clock (started_at is the wall clock's),
    # for the adaptive limit's samples.
    started_mono: float = 0.0
    # No request was made: the receiver's address is refused (delivery.receivers.addresses).
    refused: bool = False
    # The service says the destination no longer exists (kinds.base.Verdict.GONE).
    gone: bool = False
    # The address a mail relay refused for good at RCPT (a 5xx): the record marks it undeliverable
    # (users.services.recipient_email_undeliverable_mark). "" for every other answer.
    undeliverable: str = ""

    def describe(self) -> str:
        """What happened, naming no one: "HTTP 503 (Service Unavailable)", "Timed out after 10 s"."""
        if self.status_code is not None:
            # `error` beside a status is only ever a kind's code from its fixed list ("channel_not_found"), or
            # a redirect's Location as the kind shows a URL (_redirect_said): never the receiver's words.
            return status_description(self.status_code) + (f": {self.error}" if self.error else "")
        return self.error or "unknown error"


# How a verdict is recorded as the attempt's outcome (GONE: refused, and the endpoint gone). An
# unknown outcome (the message may or may not have been taken) is tried again under the same
# idempotency key, which is what the key is for: the receiver can tell a second copy.
OUTCOME_OF = {
    Verdict.DELIVERED: AttemptOutcome.DELIVERED,
    Verdict.RETRY: AttemptOutcome.TRANSIENT_FAILURE,
    Verdict.REFUSED: AttemptOutcome.PERMANENT_FAILURE,
    Verdict.GONE: AttemptOutcome.PERMANENT_FAILURE,
    Verdict.UNKNOWN: AttemptOutcome.TRANSIENT_FAILURE,
}


@functools.cache  # a status is three digits (aiohttp refuses any other): at most 900 of them
def status_description(status_code: int) -> str:
    """The status with its standard reason phrase (RFC 9110's), never the receiver's own, which may quote anything."""
    try:
        return f"HTTP {status_code} ({http.HTTPStatus(status_code).phrase})"
    except ValueError:
        return f"HTTP {status_code}"


class Transport(Protocol):
    """What the worker's sender and the test message speak to a transport (this module's docstring)."""

    async def open(self) -> None: ...

    async def send(self, delivery: ClaimedDelivery, *, url: str, settings: LaneSettings) -> SendResult: ...

    async def close(self) -> None: ...


def answered(
    delivery: ClaimedDelivery,
    reading: Reading,
    *,
    started_at: datetime,
    started_mono: float,
    signal: Signal | None = None,
    error: str = "",
    detail: str = "",
    response_excerpt: str = "",
    refused: bool = False,
) -> SendResult:
    """A transport's `reading` of one answer as the protocol's result, finished now.

    `signal` is what the answer says of the receiver when the transport knows more
    than the verdict does (a mail relay's 4xx for one greylisted address: retry the
    message, but the relay is well, Signal.NEUTRAL; a refused login: Signal.REFUSAL);
    by default the verdict's (delivery.rules.answers.verdict_signal). `error`: what
    happened, in our words; an unknown outcome says so first. `refused`: no request
    was made, the receiver's address is refused (REFUSED, Signal.NEUTRAL).
    """
    verdict = reading.verdict
    retry_after = reading.retry_after if verdict == Verdict.RETRY else None
    if verdict == Verdict.UNKNOWN:
        error = "Outcome unknown" + (f": {error}" if error else "")
    elif verdict != Verdict.DELIVERED and not error:
        error = reading.code
    return SendResult(
        delivery=delivery,
        outcome=OUTCOME_OF[verdict],
        signal=verdict_signal(verdict, retry_after=retry_after) if signal is None else signal,
        started_at=started_at,
        finished_at=datetime.now(UTC),
        duration_ms=int((time.monotonic() - started_mono) * 1000),
        error="" if verdict == Verdict.DELIVERED else error,
        detail="" if verdict == Verdict.DELIVERED else detail,
        response_excerpt=response_excerpt,
        retry_after=retry_after,
        started_mono=started_mono,
        refused=refused,
        gone=verdict == Verdict.GONE,
    )
