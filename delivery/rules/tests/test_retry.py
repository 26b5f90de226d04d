"""The retry decision, as a table: (outcome, attempt, Retry-After) in, (status, delay, reason) out."""

from datetime import timedelta

import pytest

from delivery.models import AttemptOutcome, DeliveryStatus
from delivery.rules.retry import Decision, RetryPolicy, decide

POLICY = RetryPolicy(base=timedelta(seconds=10), cap=timedelta(hours=1))


def top_of_range(low: float, high: float) -> float:
    """A jitter that always picks the longest wait, so the table is exact."""
    return high


DELIVERED, TRANSIENT, PERMANENT, ABANDONED = (
    AttemptOutcome.DELIVERED,
    AttemptOutcome.TRANSIENT_FAILURE,
    AttemptOutcome.PERMANENT_FAILURE,
    AttemptOutcome.ABANDONED,
)
QUEUED, DEAD = DeliveryStatus.QUEUED, DeliveryStatus.DEAD


@pytest.mark.parametrize(
    "outcome, attempt, max_attempts, retry_after, expected",
    [
        # delivered at any attempt: done
        (DELIVERED, 1, 8, None, Decision(DeliveryStatus.DELIVERED, timedelta(0), "")),
        (DELIVERED, 8, 8, None, Decision(DeliveryStatus.DELIVERED, timedelta(0), "")),
        # transient: exponential, 10 s * 2^(n-1), capped at the hour
        (TRANSIENT, 1, 8, None, Decision(QUEUED, timedelta(seconds=10), "HTTP 503")),
        (TRANSIENT, 2, 8, None, Decision(QUEUED, timedelta(seconds=20), "HTTP 503")),
        (TRANSIENT, 7, 8, None, Decision(QUEUED, timedelta(seconds=640), "HTTP 503")),
        (TRANSIENT, 12, 20, None, Decision(QUEUED, timedelta(hours=1), "HTTP 503")),
        # Retry-After wins over the back-off, up to the cap
        (TRANSIENT, 1, 8, 120.0, Decision(QUEUED, timedelta(seconds=120), "HTTP 503")),
        (TRANSIENT, 1, 8, 86400.0, Decision(QUEUED, timedelta(hours=1), "HTTP 503")),
        (TRANSIENT, 1, 8, -5.0, Decision(QUEUED, timedelta(0), "HTTP 503")),
        # the last attempt failing is final
        (TRANSIENT, 8, 8, None, Decision(DEAD, timedelta(0), "Gave up after 8 attempts; last: HTTP 503")),
        # permanent at once, whatever the attempt
        (PERMANENT, 1, 8, None, Decision(DEAD, timedelta(0), "Permanent failure: HTTP 503")),
        # a lost worker's attempt is tried again at once, unless it was the last
        (ABANDONED, 3, 8, None, Decision(QUEUED, timedelta(0), "HTTP 503")),
        (ABANDONED, 8, 8, None, Decision(DEAD, timedelta(0), "Gave up after 8 attempts; last: HTTP 503")),
    ],
)
def test_retry_decision(outcome, attempt, max_attempts, retry_after, expected):
    decision = decide(
        outcome=outcome,
        attempt=attempt,
        max_attempts=max_attempts,
        description="HTTP 503",
        retry_after=retry_after,
        policy=POLICY,
        jitter=top_of_range,
    )

    assert decision == expected


def test_the_jitter_spreads_each_wait_over_zero_to_the_exponential_ceiling():
    seen = []

    decide(
        outcome=TRANSIENT,
        attempt=3,
        max_attempts=8,
        description="",
        policy=POLICY,
        jitter=lambda low, high: seen.append((low, high)) or 0.0,
    )

    assert seen == [(0.0, 40.0)]


HOUR = timedelta(hours=1)


def queued(delay, *, charged=True):
    return Decision(QUEUED, delay, "answer", charged=charged)


def dead(reason):
    return Decision(DEAD, timedelta(0), reason)


WAIT = queued(None, charged=False)  # waits on the endpoint: no attempt spent, due time kept


LATE = "Not delivered within EVENT_MAX_LATENESS (48 h) of being queued: the receiver was failing, throttling or paused; last: answer"


@pytest.mark.parametrize(
    "outcome, status_code, retry_after, endpoint_down, expected",
    [
        # queued longer ago than EVENT_MAX_LATENESS: whatever would wait again is given up
        (TRANSIENT, 429, 30.0, False, dead(LATE)),
        (TRANSIENT, 429, None, False, dead(LATE)),
        (TRANSIENT, 500, None, True, dead(LATE)),
        (TRANSIENT, 500, None, False, dead(LATE)),
        # final answers stay what they are
        (DELIVERED, 200, None, False, Decision(DeliveryStatus.DELIVERED, timedelta(0), "")),
        (PERMANENT, 422, None, False, dead("Permanent failure: answer")),
    ],
)
def test_a_delivery_that_outlived_the_lateness_does_not_wait_again(
    outcome, status_code, retry_after, endpoint_down, expected
):
    decision = decide(
        outcome=outcome,
        attempt=1,
        max_attempts=8,
        description="answer",
        status_code=status_code,
        retry_after=retry_after,
        endpoint_down=endpoint_down,
        outlived=timedelta(hours=48),
        policy=POLICY,
        jitter=top_of_range,
    )

    assert decision == expected


@pytest.mark.parametrize(
    "outcome, status_code, retry_after, endpoint_down, refused_by_message, attempt, expected",
    [
        # a success is a success, even from an endpoint the batch found down
        (DELIVERED, 200, None, False, False, 1, Decision(DeliveryStatus.DELIVERED, timedelta(0), "")),
        (DELIVERED, 204, None, True, False, 3, Decision(DeliveryStatus.DELIVERED, timedelta(0), "")),
        # 5xx and timeouts from a working receiver: charged, backing off
        (TRANSIENT, 500, None, False, False, 1, queued(timedelta(seconds=10))),
        (TRANSIENT, 503, None, False, False, 3, queued(timedelta(seconds=40))),
        (TRANSIENT, None, None, False, False, 2, queued(timedelta(seconds=20))),
        (TRANSIENT, 502, None, False, False, 8, dead("Gave up after 8 attempts; last: answer")),
        # throttled: the receiver's pace, never charged, whatever the attempt or the endpoint
        (TRANSIENT, 429, None, False, False, 1, WAIT),
        (TRANSIENT, 429, None, False, False, 8, WAIT),
        (TRANSIENT, 429, None, True, False, 8, WAIT),
        (TRANSIENT, 429, 30.0, False, False, 1, queued(timedelta(seconds=30), charged=False)),
        (TRANSIENT, 429, 86400.0, False, False, 1, queued(HOUR, charged=False)),
        (TRANSIENT, 503, 30.0, False, False, 8, queued(timedelta(seconds=30), charged=False)),
        (TRANSIENT, 429, 30.0, True, False, 1, queued(timedelta(seconds=30), charged=False)),
        # the endpoint is down: failures and refusals wait for it, even on the last attempt
        (TRANSIENT, 500, None, True, False, 1, WAIT),
        (TRANSIENT, None, None, True, False, 8, WAIT),
        (PERMANENT, 404, None, True, False, 1, WAIT),
        (PERMANENT, 401, None, True, False, 8, WAIT),
        # a refusal the receiver contradicted (it accepted another message): this message's own, DEAD at once
        (PERMANENT, 401, None, False, True, 1, dead("Permanent failure: answer")),
        (PERMANENT, 410, None, False, True, 1, dead("Permanent failure: answer")),
        # a refusal nothing contradicts yet: charged like a 5xx until the endpoint is found down
        (PERMANENT, 403, None, False, False, 1, queued(timedelta(seconds=10))),
        (PERMANENT, 404, None, False, False, 2, queued(timedelta(seconds=20))),
        (PERMANENT, 404, None, False, False, 8, dead("Gave up after 8 attempts; last: answer")),
        # about the message itself: DEAD at once, whatever the endpoint
        (PERMANENT, 422, None, False, False, 1, dead("Permanent failure: answer")),
        (PERMANENT, 400, None, False, False, 1, dead("Permanent failure: answer")),
        (PERMANENT, 422, None, True, False, 1, dead("Permanent failure: answer")),
        # no request made (a refused address): DEAD at once, even while the endpoint is down
        (PERMANENT, None, None, False, False, 1, dead("Permanent failure: answer")),
        (PERMANENT, None, None, True, False, 1, dead("Permanent failure: answer")),
    ],
)
def test_retry_decision_weighs_the_endpoints_verdict(
    outcome, status_code, retry_after, endpoint_down, refused_by_message, attempt, expected
):
    decision = decide(
        outcome=outcome,
        attempt=attempt,
        max_attempts=8,
        description="answer",
        status_code=status_code,
        retry_after=retry_after,
        endpoint_down=endpoint_down,
        refused_by_message=refused_by_message,
        policy=POLICY,
        jitter=top_of_range,
    )

    assert decision == expected


def test_a_delivery_that_met_a_gone_destination_waits_for_the_operator_without_spending_an_attempt():
    decision = decide(
        outcome=PERMANENT,
        attempt=8,
        max_attempts=8,
        description="HTTP 404 (channel_not_found)",
        status_code=404,
        gone=True,
        endpoint_down=True,
        policy=POLICY,
        jitter=top_of_range,
    )

    assert decision == Decision(QUEUED, None, "HTTP 404 (channel_not_found)", charged=False)


def test_a_gone_delivery_queued_longer_than_the_lateness_is_given_up():
    decision = decide(
        outcome=PERMANENT,
        attempt=1,
        max_attempts=8,
        description="HTTP 404 (channel_not_found)",
        status_code=404,
        gone=True,
        outlived=timedelta(hours=48),
        policy=POLICY,
    )

    assert decision.status == DEAD
