"""What one attempt's answer says about the receiver's endpoint, as one of a few signals.

The retry decision (delivery.rules.retry), the endpoint's health (delivery.rules.health)
and a worker's lane (delivery.worker.lane) each read an answer by these signals, so the
three never disagree about what a 429 or a 404 means. The transport that got the answer
decides its signal once (delivery.receivers.protocol): the HTTP transport by `signal_of`,
from the status; any other from its verdict (`verdict_signal`), or by knowing more.
"""

from __future__ import annotations

import enum

from delivery.models import AttemptOutcome
from kinds import Verdict

# Answers that say the receiver itself refuses us: the URL or the credentials.
ENDPOINT_REFUSALS = frozenset({401, 403, 404, 410})


class Signal(enum.StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    THROTTLE = "throttle"  # wait as the receiver asks: 429 or 503 with a Retry-After
    PACE = "pace"  # the receiver's rate limit: 429 without Retry-After
    REFUSAL = "refusal"
    NEUTRAL = "neutral"
    # The service says the destination no longer exists (kinds.base.Verdict.GONE).
    GONE = "gone"


# What a transport-neutral verdict (kinds.base.Verdict) says of the receiver when its transport says
# nothing more. Refused for good is the message's fault, not the receiver's; an unknown outcome (a
# connection lost before the receiver answered) counts against the receiver, as a lost connection does.
_VERDICT_SIGNALS = {
    Verdict.DELIVERED: Signal.SUCCESS,
    Verdict.RETRY: Signal.FAILURE,
    Verdict.REFUSED: Signal.NEUTRAL,
    Verdict.GONE: Signal.GONE,
    Verdict.UNKNOWN: Signal.FAILURE,
}


def verdict_signal(verdict: Verdict, *, retry_after: float | None) -> Signal:
    """What `verdict` says of the receiver by itself: a retry with the receiver's own delay is a throttle."""
    if verdict == Verdict.RETRY and retry_after is not None:
        return Signal.THROTTLE
    return _VERDICT_SIGNALS[verdict]


def signal_of(
    *, outcome: str, status_code: int | None, retry_after: float | None, gone: bool = False
) -> Signal:
    """What one HTTP answer says about the endpoint (not about the message): the HTTP transport's signal."""
    if outcome == AttemptOutcome.DELIVERED:
        return Signal.SUCCESS
    if gone:
        return Signal.GONE
    if status_code == 429 and retry_after is None:
        return Signal.PACE
    if status_code in (429, 503) and retry_after is not None:
        return Signal.THROTTLE
    if status_code in ENDPOINT_REFUSALS:
        return Signal.REFUSAL
    if outcome == AttemptOutcome.TRANSIENT_FAILURE:
        return Signal.FAILURE
    return Signal.NEUTRAL
