"""The retry decision: what happens to a delivery after an attempt. Pure, so it is tested as a table.

Capped exponential back-off with full jitter (AWS Architecture Blog, "Exponential
Backoff and Jitter"): the n-th retry waits a uniform random time in
[0, min(cap, base * 2^(n-1))]. A receiver's Retry-After is honoured up to the
cap, so a receiver asking for a day cannot park a birthday greeting for a day.

What the receiver's endpoint says comes first (delivery.rules.health): while it is
down, or when it throttles (429, 503 with Retry-After), a delivery waits for
it without spending an attempt and keeps its place in the due order; an
attempt is spent only on a failure of this message to a receiver that works.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

from delivery.models import AttemptOutcome, DeliveryStatus
from delivery.rules.answers import Signal, signal_of


@dataclass(frozen=True)
class RetryPolicy:
    """How long a delivery waits before its next try, and how long a receiver's Retry-After is obeyed: by
    the back-off here, by the endpoint's block (delivery.rules.health) and by a worker's lane."""

    base: timedelta
    cap: timedelta

    @classmethod
    def from_settings(cls) -> RetryPolicy:
        return cls(base=settings.DELIVERY_RETRY_BASE, cap=settings.DELIVERY_RETRY_MAX)

    def retry_after_wait(self, retry_after: float) -> float:
        """Seconds a receiver's Retry-After is obeyed: as it asks, from 0 up to the cap (a receiver asking
        for a day cannot park a greeting, or the fleet, for a day)."""
        return min(max(retry_after, 0.0), self.cap.total_seconds())


@dataclass(frozen=True)
class Decision:
    status: str  # DELIVERED, QUEUED (try again after `delay`) or DEAD
    # Before the next attempt (QUEUED only); None: the delivery keeps its due time.
    delay: timedelta | None
    reason: str  # the delivery's last_error, and the event's failure reason when DEAD
    # False: the attempt waited on the endpoint (down or throttling). It is not
    # counted against max_attempts and the delivery keeps its due time.
    charged: bool = True


def retry_delay(
    *, attempt: int, retry_after: float | None, policy: RetryPolicy, jitter: Callable[[float, float], float]
) -> timedelta:
    """How long before the next try after failed attempt number `attempt` (1-based)."""
    if retry_after is not None:
        return timedelta(seconds=policy.retry_after_wait(retry_after))
    ceiling = min(policy.cap.total_seconds(), policy.base.total_seconds() * 2 ** max(attempt - 1, 0))
    return timedelta(seconds=jitter(0.0, ceiling))


def late_reason(*, lateness: timedelta, last: str) -> str:
    """Why a delivery still waiting on its receiver EVENT_MAX_LATENESS after being queued is given up."""
    return (
        f"Not delivered within EVENT_MAX_LATENESS ({_duration(lateness)}) of being queued: the receiver "
        f"was failing, throttling or paused; last: {last or 'no attempt'}"
    )


def _duration(span: timedelta) -> str:
    seconds = span.total_seconds()
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


# What every accepted attempt leads to: one value, shared (a batch at a 0 ms receiver is all of these).
_DELIVERED = Decision(status=DeliveryStatus.DELIVERED, delay=timedelta(0), reason="")


def decide(
    *,
    outcome: str,
    attempt: int,
    max_attempts: int,
    description: str,
    signal: Signal | None = None,
    status_code: int | None = None,
    retry_after: float | None = None,
    gone: bool = False,
    endpoint_down: bool = False,
    refused_by_message: bool = False,
    outlived: timedelta | None = None,
    policy: RetryPolicy,
    jitter: Callable[[float, float], float] = random.uniform,
) -> Decision:
    """What follows attempt number `attempt` of `max_attempts`, which ended in `outcome` (`description`:
    "HTTP 503 (Service Unavailable)"). `signal` is what the transport read of the receiver, else it is read
    from `status_code`, `retry_after` and `gone`; `endpoint_down` and `refused_by_message` are the
    endpoint's verdict after this batch (delivery.rules.health); `outlived` is EVENT_MAX_LATENESS when
    the delivery was queued longer ago than that."""
    if signal is None:
        signal = signal_of(outcome=outcome, status_code=status_code, retry_after=retry_after, gone=gone)
    if signal == Signal.SUCCESS:
        return _DELIVERED
    if signal in (Signal.THROTTLE, Signal.PACE):
        # The receiver's own pace. With a Retry-After the whole endpoint waits (delivery.rules.health)
        # and this one as asked; without, it keeps its place and the lanes slow down to a
        # learned rate (delivery.rules.limit).
        delay = (
            None
            if retry_after is None
            else retry_delay(attempt=attempt, retry_after=retry_after, policy=policy, jitter=jitter)
        )
        return _wait_again(delay=delay, description=description, charged=False, outlived=outlived)
    # The destination is gone (delivery.rules.health made its endpoint GONE; it waits for the operator) or
    # its endpoint is down: the message is not at fault, so it waits without an attempt, in its due order.
    if signal == Signal.GONE or (endpoint_down and signal in (Signal.FAILURE, Signal.REFUSAL)):
        return _wait_again(delay=None, description=description, charged=False, outlived=outlived)
    if outcome == AttemptOutcome.PERMANENT_FAILURE and (signal != Signal.REFUSAL or refused_by_message):
        return _dead(f"Permanent failure: {description}")
    if attempt >= max_attempts:
        return _dead(f"Gave up after {attempt} attempts; last: {description}")
    # A lost worker's attempt (ABANDONED) is tried again at once: nothing says the receiver is unwell,
    # and the lease already cost a wait.
    if outcome == AttemptOutcome.ABANDONED:
        return _wait_again(delay=timedelta(0), description=description, charged=True, outlived=outlived)
    delay = retry_delay(attempt=attempt, retry_after=retry_after, policy=policy, jitter=jitter)
    return _wait_again(delay=delay, description=description, charged=True, outlived=outlived)


def _wait_again(
    *, delay: timedelta | None, description: str, charged: bool, outlived: timedelta | None
) -> Decision:
    """QUEUED again after `delay` (None: it keeps its due time), unless the delivery `outlived` its
    lateness: what would wait again is given up instead (a receiver that answers 429 for ever cannot
    keep it)."""
    if outlived is not None:
        return _dead(late_reason(lateness=outlived, last=description))
    return Decision(status=DeliveryStatus.QUEUED, delay=delay, reason=description, charged=charged)


def _dead(reason: str) -> Decision:
    return Decision(status=DeliveryStatus.DEAD, delay=timedelta(0), reason=reason)
