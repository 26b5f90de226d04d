"""An endpoint's health: what a batch of answers says about the receiver. Pure, so it is tested as a table.

Each attempt's answer is one of five signals. A success proves the receiver
works. A failure (timeout, connection error, 5xx, 408, 425) and a throttle
(429 or 503 with a Retry-After) count against it. A 429 without Retry-After is
the receiver's pace: its lanes learn a rate from it (delivery.rules.limit.LearnedRate),
and it counts neither for nor against the receiver, which is up and says only
"not so fast" (a limiter refuses at once what a burst sends over its limit, and
counted as failures those refusals would make it FAILING); it is its last error
all the same, for the operator to see. A 401/403/404/410 counts
against it too - a wrong URL or rotated credentials fail every message - unless
the receiver accepted another message sent no earlier, which proves the URL
and credentials good: then it is that one message's failure. Any other answer
(400, 422, a redirect) is about the message and says nothing of the receiver; nor
does a request that was never made: a receiver address our policy refuses
(delivery.receivers.addresses) is our rule, not the receiver failing, so it leaves
the endpoint's health alone and its delivery is DEAD at once with the reason,
instead of waiting behind a FAILING endpoint for a receiver that cannot recover.
An answer its kind reads as gone (kinds/: Slack's `channel_not_found`,
Discord's Unknown Webhook) makes the endpoint GONE at once: no probe can bring
a deleted webhook back, so nothing more is sent until an operator resumes it or
changes the URL, and its deliveries wait, as for a pause, without spending attempts.

Enough failures in a row (over every worker: the count lives in the endpoint's
row) make the endpoint FAILING: deliveries wait without spending attempts and
one probe at a time tries the receiver, at intervals that double up to a cap.
The first success makes it HEALTHY again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings

from delivery.models import EndpointState
from delivery.rules.answers import Signal
from delivery.rules.retry import RetryPolicy


@dataclass(frozen=True)
class HealthPolicy:
    failure_threshold: int
    probe_first_interval: timedelta
    probe_max_interval: timedelta
    # A Retry-After blocks the endpoint as long as the retry policy obeys one (RetryPolicy.retry_after_wait).
    retry: RetryPolicy

    @classmethod
    def from_settings(cls, *, retry: RetryPolicy) -> HealthPolicy:
        return cls(
            failure_threshold=settings.ENDPOINT_FAILURE_THRESHOLD,
            probe_first_interval=settings.ENDPOINT_PROBE_FIRST_INTERVAL,
            probe_max_interval=settings.ENDPOINT_PROBE_MAX_INTERVAL,
            retry=retry,
        )


@dataclass(frozen=True)
class Answer:
    """One attempt's answer, as the endpoint's health needs it."""

    signal: Signal
    started_at: datetime
    finished_at: datetime
    description: str
    retry_after: float | None = None
    probe: bool = False


@dataclass(frozen=True)
class Health:
    """The endpoint row's health columns."""

    state: str
    consecutive_failures: int
    last_success_at: datetime | None
    last_failure_at: datetime | None
    last_error: str
    failing_since: datetime | None
    next_probe_at: datetime | None
    probe_interval: timedelta | None
    blocked_until: datetime | None

    def is_down(self, policy: HealthPolicy) -> bool:
        """Gone, or failed often enough in a row, so that its deliveries wait instead of spending attempts."""
        return (
            self.state in (EndpointState.FAILING, EndpointState.GONE)
            or self.consecutive_failures >= policy.failure_threshold
        )

    def refused_by_message(self, answer: Answer) -> bool:
        """A refusal the receiver contradicted: it accepted a message sent no earlier."""
        return (
            answer.signal == Signal.REFUSAL
            and self.last_success_at is not None
            and (self.last_success_at >= answer.started_at)
        )


def observe(*, health: Health, answers: Sequence[Answer], now: datetime, policy: HealthPolicy) -> Health:
    """The endpoint's health after `answers` (one worker's batch, in any order)."""
    successes = [a.finished_at for a in answers if a.signal == Signal.SUCCESS]
    last_success = max(
        [*successes, *([health.last_success_at] if health.last_success_at else [])], default=None
    )
    seen = Health(**{**health.__dict__, "last_success_at": last_success})
    consecutive = health.consecutive_failures
    last_failure, last_error = health.last_failure_at, health.last_error
    blocked_until = health.blocked_until
    for answer in sorted(answers, key=lambda a: a.finished_at):
        if answer.signal == Signal.SUCCESS:
            consecutive = 0
        elif answer.signal in (Signal.FAILURE, Signal.THROTTLE, Signal.GONE) or (
            answer.signal == Signal.REFUSAL and not seen.refused_by_message(answer)
        ):
            consecutive += 1
            last_failure, last_error = answer.finished_at, answer.description
        elif answer.signal == Signal.PACE:
            last_failure, last_error = answer.finished_at, answer.description
        if answer.signal == Signal.THROTTLE and answer.retry_after is not None:
            until = now + timedelta(seconds=policy.retry.retry_after_wait(answer.retry_after))
            blocked_until = max(blocked_until, until) if blocked_until else until
    fields = {
        **seen.__dict__,
        "consecutive_failures": consecutive,
        "last_failure_at": last_failure,
        "last_error": last_error,
        "blocked_until": blocked_until,
    }
    fields.update(
        _state_move(
            health=health,
            answers=answers,
            recovered=bool(successes),
            consecutive=consecutive,
            now=now,
            policy=policy,
        )
    )
    return Health(**fields)


def _state_move(
    *,
    health: Health,
    answers: Sequence[Answer],
    recovered: bool,
    consecutive: int,
    now: datetime,
    policy: HealthPolicy,
) -> dict[str, object]:
    """The fields the batch's `answers` change of the endpoint's state and probing: none if it stays as it was.

    `recovered`: some answer was a success; `consecutive`: the failures in a row after the batch.
    """
    gone = [a for a in answers if a.signal == Signal.GONE]
    if gone and health.state in (EndpointState.HEALTHY, EndpointState.FAILING):
        # The service's own word that nothing sent here can be taken: no probe or retry can
        # change that, only an operator can. It outweighs a success in the same batch (sent
        # before the webhook was deleted). The error shown is the gone answer's.
        last = max(gone, key=lambda a: a.finished_at)
        return {
            "state": EndpointState.GONE,
            "last_failure_at": last.finished_at,
            "last_error": last.description,
            "failing_since": None,
            "next_probe_at": None,
            "probe_interval": None,
        }
    if health.state == EndpointState.FAILING and recovered:
        return {
            "state": EndpointState.HEALTHY,
            "failing_since": None,
            "next_probe_at": None,
            "probe_interval": None,
        }
    if health.state == EndpointState.HEALTHY and consecutive >= policy.failure_threshold:
        return {
            "state": EndpointState.FAILING,
            "failing_since": now,
            "next_probe_at": now + policy.probe_first_interval,
            "probe_interval": min(policy.probe_first_interval * 2, policy.probe_max_interval),
        }
    if health.state == EndpointState.FAILING and any(a.probe and a.signal != Signal.SUCCESS for a in answers):
        assert health.probe_interval is not None  # set on entering FAILING
        return {
            "next_probe_at": now + health.probe_interval,
            "probe_interval": min(health.probe_interval * 2, policy.probe_max_interval),
        }
    return {}
