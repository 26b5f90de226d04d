"""An endpoint's health, as a table: what each answer says, and what a batch of answers makes of the endpoint."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from delivery.models import AttemptOutcome, EndpointState
from delivery.rules.answers import Signal, signal_of
from delivery.rules.health import Answer, Health, HealthPolicy, observe
from delivery.rules.retry import RetryPolicy

DELIVERED, TRANSIENT, PERMANENT, ABANDONED = (
    AttemptOutcome.DELIVERED,
    AttemptOutcome.TRANSIENT_FAILURE,
    AttemptOutcome.PERMANENT_FAILURE,
    AttemptOutcome.ABANDONED,
)
HEALTHY, FAILING, PAUSED = EndpointState.HEALTHY, EndpointState.FAILING, EndpointState.PAUSED

NOW = datetime(2025, 3, 8, 12, 0, tzinfo=UTC)
POLICY = HealthPolicy(
    failure_threshold=5,
    probe_first_interval=timedelta(seconds=2),
    probe_max_interval=timedelta(seconds=60),
    retry=RetryPolicy(base=timedelta(seconds=10), cap=timedelta(hours=1)),
)
FRESH = Health(
    state=HEALTHY,
    consecutive_failures=0,
    last_success_at=None,
    last_failure_at=None,
    last_error="",
    failing_since=None,
    next_probe_at=None,
    probe_interval=None,
    blocked_until=None,
)


def at(seconds: float) -> datetime:
    return NOW + timedelta(seconds=seconds)


def answer(signal: Signal, *, started: float = -1.0, finished: float = 0.0, **fields) -> Answer:
    """An answer to a request started and finished `started` / `finished` seconds from NOW."""
    return Answer(
        signal=signal,
        started_at=at(started),
        finished_at=at(finished),
        description=f"{signal} answer",
        **fields,
    )


def failing(*, interval: float = 4.0, since: float = -10.0) -> Health:
    """An endpoint FAILING since `since`, whose next failed probe waits `interval` seconds."""
    return replace(
        FRESH,
        state=FAILING,
        consecutive_failures=POLICY.failure_threshold,
        failing_since=at(since),
        next_probe_at=at(0),
        probe_interval=timedelta(seconds=interval),
    )


# -- signal_of ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "outcome, status_code, retry_after, expected",
    [
        (DELIVERED, 200, None, Signal.SUCCESS),
        (DELIVERED, 204, 30.0, Signal.SUCCESS),
        # throttling: 429 or 503 with a Retry-After; a 429 without one is the receiver's pace
        (TRANSIENT, 429, None, Signal.PACE),
        (TRANSIENT, 429, 30.0, Signal.THROTTLE),
        (TRANSIENT, 503, 30.0, Signal.THROTTLE),
        (TRANSIENT, 503, None, Signal.FAILURE),
        # failures: 5xx, 408, 425, timeouts and connection errors (no status)
        (TRANSIENT, 500, None, Signal.FAILURE),
        (TRANSIENT, 408, None, Signal.FAILURE),
        (TRANSIENT, 425, None, Signal.FAILURE),
        (TRANSIENT, None, None, Signal.FAILURE),
        # refusals: the URL or the credentials
        (PERMANENT, 401, None, Signal.REFUSAL),
        (PERMANENT, 403, None, Signal.REFUSAL),
        (PERMANENT, 404, None, Signal.REFUSAL),
        (PERMANENT, 410, None, Signal.REFUSAL),
        # about the message, not the receiver
        (PERMANENT, 400, None, Signal.NEUTRAL),
        (PERMANENT, 422, None, Signal.NEUTRAL),
        (PERMANENT, 301, None, Signal.NEUTRAL),
        # no request made: a bad URL, or an address the policy refuses (delivery.receivers.addresses)
        (PERMANENT, None, None, Signal.NEUTRAL),
        (ABANDONED, None, None, Signal.NEUTRAL),
    ],
)
def test_what_an_answer_says_about_the_endpoint(outcome, status_code, retry_after, expected):
    assert signal_of(outcome=outcome, status_code=status_code, retry_after=retry_after) == expected


# -- HealthPolicy -------------------------------------------------------------------------------------------------


def test_the_policy_reads_the_endpoint_settings_and_caps_retry_after_at_the_retry_maximum(settings):
    settings.ENDPOINT_FAILURE_THRESHOLD = 7
    settings.ENDPOINT_PROBE_FIRST_INTERVAL = timedelta(seconds=3)
    settings.ENDPOINT_PROBE_MAX_INTERVAL = timedelta(seconds=90)
    settings.DELIVERY_RETRY_MAX = timedelta(minutes=20)

    assert HealthPolicy.from_settings(retry=RetryPolicy.from_settings()) == HealthPolicy(
        failure_threshold=7,
        probe_first_interval=timedelta(seconds=3),
        probe_max_interval=timedelta(seconds=90),
        retry=RetryPolicy(base=settings.DELIVERY_RETRY_BASE, cap=timedelta(minutes=20)),
    )


# -- HEALTHY -> FAILING -------------------------------------------------------------------------------------------


def test_failures_below_the_threshold_are_counted_but_leave_the_endpoint_healthy():
    answers = [answer(Signal.FAILURE, finished=-i) for i in range(4)]

    after = observe(health=FRESH, answers=answers, now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures) == (HEALTHY, 4)
    assert after.last_failure_at == at(0)
    assert after.last_error == "failure answer"
    assert not after.is_down(POLICY)


def test_the_threshold_of_failures_in_a_row_makes_the_endpoint_failing_with_the_first_probe_one_interval_away():
    before = replace(FRESH, consecutive_failures=3)
    answers = [answer(Signal.FAILURE, finished=-1), answer(Signal.THROTTLE, finished=0)]

    after = observe(health=before, answers=answers, now=NOW, policy=POLICY)

    assert after.state == FAILING
    assert after.consecutive_failures == 5
    assert after.failing_since == NOW
    assert after.next_probe_at == NOW + timedelta(seconds=2)
    assert after.probe_interval == timedelta(seconds=4)  # the wait after the first failed probe
    assert after.is_down(POLICY)


def test_a_success_after_the_failures_in_the_same_batch_resets_the_count():
    answers = [answer(Signal.FAILURE, finished=-5 + i) for i in range(5)] + [
        answer(Signal.SUCCESS, finished=1)
    ]

    after = observe(health=FRESH, answers=answers, now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures) == (HEALTHY, 0)
    assert after.last_success_at == at(1)


def test_answers_are_counted_in_the_order_they_finished_not_the_order_given():
    # The success finished first, so the five failures after it are in a row.
    answers = [answer(Signal.FAILURE, finished=i) for i in range(1, 6)] + [answer(Signal.SUCCESS, finished=0)]

    after = observe(health=FRESH, answers=list(reversed(answers)), now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures) == (FAILING, 5)


def test_neutral_answers_neither_count_nor_reset_the_failures():
    before = replace(FRESH, consecutive_failures=4)

    after = observe(health=before, answers=[answer(Signal.NEUTRAL)], now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures, after.last_failure_at) == (HEALTHY, 4, None)


# -- probes -------------------------------------------------------------------------------------------------------


def test_each_failed_probe_doubles_the_wait_up_to_the_maximum():
    health = observe(
        health=replace(FRESH, consecutive_failures=4),
        answers=[answer(Signal.FAILURE)],
        now=NOW,
        policy=POLICY,
    )
    waits = [health.next_probe_at - NOW]
    for _ in range(7):
        probe_at = health.next_probe_at
        health = observe(
            health=health,
            answers=[answer(Signal.FAILURE, started=-0.5, finished=0, probe=True)],
            now=probe_at,
            policy=POLICY,
        )
        waits.append(health.next_probe_at - probe_at)

    assert [w.total_seconds() for w in waits] == [2, 4, 8, 16, 32, 60, 60, 60]
    assert health.state == FAILING
    assert health.failing_since == NOW


def test_a_failure_that_was_not_the_probe_leaves_the_probe_schedule_alone():
    before = failing(interval=8.0)

    after = observe(health=before, answers=[answer(Signal.FAILURE, probe=False)], now=NOW, policy=POLICY)

    assert (after.next_probe_at, after.probe_interval) == (before.next_probe_at, before.probe_interval)


def test_a_probe_answered_with_a_throttle_counts_as_a_failed_probe():
    after = observe(
        health=failing(interval=8.0), answers=[answer(Signal.THROTTLE, probe=True)], now=NOW, policy=POLICY
    )

    assert after.next_probe_at == NOW + timedelta(seconds=8)
    assert after.probe_interval == timedelta(seconds=16)


@pytest.mark.parametrize("probe", [True, False])
def test_a_success_while_failing_makes_the_endpoint_healthy_and_clears_the_probe(probe):
    after = observe(health=failing(), answers=[answer(Signal.SUCCESS, probe=probe)], now=NOW, policy=POLICY)

    assert after.state == HEALTHY
    assert after.consecutive_failures == 0
    assert (after.failing_since, after.next_probe_at, after.probe_interval) == (None, None, None)
    assert not after.is_down(POLICY)


def test_a_paused_endpoint_counts_failures_but_does_not_change_state():
    before = replace(FRESH, state=PAUSED, consecutive_failures=4)

    after = observe(health=before, answers=[answer(Signal.FAILURE)], now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures) == (PAUSED, 5)
    assert after.next_probe_at is None


# -- Retry-After --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "retry_after, blocked_for",
    [(30.0, timedelta(seconds=30)), (86400.0, timedelta(hours=1)), (-5.0, timedelta(0))],
)
def test_a_retry_after_blocks_the_endpoint_for_that_long_up_to_the_cap(retry_after, blocked_for):
    after = observe(
        health=FRESH, answers=[answer(Signal.THROTTLE, retry_after=retry_after)], now=NOW, policy=POLICY
    )

    assert after.blocked_until == NOW + blocked_for


def test_a_shorter_retry_after_does_not_shorten_an_earlier_block():
    before = replace(FRESH, blocked_until=at(120))

    after = observe(
        health=before, answers=[answer(Signal.THROTTLE, retry_after=10.0)], now=NOW, policy=POLICY
    )

    assert after.blocked_until == at(120)


def test_the_longest_retry_after_of_a_batch_wins():
    answers = [
        answer(Signal.THROTTLE, retry_after=40.0, finished=-1),
        answer(Signal.THROTTLE, retry_after=5.0),
    ]

    after = observe(health=FRESH, answers=answers, now=NOW, policy=POLICY)

    assert after.blocked_until == at(40)


def test_a_429_without_retry_after_counts_neither_for_nor_against_the_endpoint_and_blocks_nothing():
    # Given two failures in a row, then a limiter's refusals of a burst, more than the threshold
    before = replace(FRESH, consecutive_failures=2, last_success_at=at(-60))
    answers = [
        answer(Signal.PACE, started=-1.0, finished=i / 100) for i in range(POLICY.failure_threshold * 4)
    ]

    after = observe(health=before, answers=answers, now=NOW, policy=POLICY)

    # Then the streak is neither longer nor broken, nothing waits, and the 429 is the last error shown
    assert (after.state, after.consecutive_failures, after.blocked_until) == (HEALTHY, 2, None)
    assert after.last_success_at == at(-60)
    assert (after.last_failure_at, after.last_error) == (answers[-1].finished_at, "pace answer")


# -- refusals (401/403/404/410) -----------------------------------------------------------------------------------


def test_refusals_on_every_request_in_a_row_make_the_endpoint_failing():
    answers = [answer(Signal.REFUSAL, started=i - 0.5, finished=i) for i in range(5)]
    before = replace(FRESH, last_success_at=at(-60))  # it worked, a minute ago

    after = observe(health=before, answers=answers, now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures) == (FAILING, 5)


def test_a_lone_refusal_among_successes_is_that_messages_failure_not_the_endpoints():
    # Given a success that finished after the refusal was sent: the URL and credentials are good
    before = replace(FRESH, consecutive_failures=4)
    answers = [
        answer(Signal.REFUSAL, started=-1.0, finished=-0.5),
        answer(Signal.SUCCESS, started=-1.0, finished=-0.2),
        answer(
            Signal.REFUSAL, started=-0.9, finished=0.0
        ),  # finished after the success, sent before it finished
    ]

    after = observe(health=before, answers=answers, now=NOW, policy=POLICY)

    assert (after.state, after.consecutive_failures) == (HEALTHY, 0)
    assert after.last_failure_at is None


def test_a_refusal_sent_after_the_last_success_counts_against_the_endpoint():
    before = replace(FRESH, last_success_at=at(-10))

    after = observe(health=before, answers=[answer(Signal.REFUSAL, started=-1.0)], now=NOW, policy=POLICY)

    assert after.consecutive_failures == 1
    assert after.last_error == "refusal answer"


# -- Health helpers -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state, consecutive, down",
    [
        (HEALTHY, 0, False),
        (HEALTHY, 4, False),
        (HEALTHY, 5, True),
        (FAILING, 0, True),
        (PAUSED, 5, True),
        (PAUSED, 0, False),
    ],
)
def test_an_endpoint_is_down_when_failing_or_at_the_threshold_of_failures(state, consecutive, down):
    assert replace(FRESH, state=state, consecutive_failures=consecutive).is_down(POLICY) is down


@pytest.mark.parametrize(
    "signal, last_success, started, contradicted",
    [
        (Signal.REFUSAL, 0.0, -1.0, True),  # accepted a message sent later than this one
        (Signal.REFUSAL, -1.0, -1.0, True),  # no earlier: the same instant counts
        (Signal.REFUSAL, -2.0, -1.0, False),  # the last success is older than this request
        (Signal.REFUSAL, None, -1.0, False),  # never accepted anything
        (Signal.FAILURE, 0.0, -1.0, False),  # only refusals can be a message's own
    ],
)
def test_a_refusal_is_the_messages_own_when_the_receiver_accepted_a_message_sent_no_earlier(
    signal, last_success, started, contradicted
):
    health = replace(FRESH, last_success_at=None if last_success is None else at(last_success))

    assert health.refused_by_message(answer(signal, started=started)) is contradicted


# -- gone (channels: the service says the destination no longer exists) -------------------------------------------


def test_a_gone_answer_is_its_own_signal_whatever_its_status():
    assert signal_of(outcome=PERMANENT, status_code=404, retry_after=None, gone=True) == Signal.GONE
    assert signal_of(outcome=PERMANENT, status_code=404, retry_after=None) == Signal.REFUSAL


@pytest.mark.parametrize("before", [FRESH, failing()])
def test_one_gone_answer_makes_a_healthy_or_failing_endpoint_gone_at_once_with_its_answer_as_the_error(
    before,
):
    after = observe(health=before, answers=[answer(Signal.GONE)], now=NOW, policy=POLICY)

    assert after.state == EndpointState.GONE
    assert after.last_error == "gone answer"
    assert (after.failing_since, after.next_probe_at, after.probe_interval) == (None, None, None)
    assert after.is_down(POLICY)


def test_a_gone_answer_outweighs_a_success_in_the_same_batch():
    after = observe(
        health=FRESH,
        answers=[answer(Signal.SUCCESS, finished=-0.5), answer(Signal.GONE)],
        now=NOW,
        policy=POLICY,
    )

    assert after.state == EndpointState.GONE


def test_a_paused_endpoint_stays_paused_when_a_request_sent_before_the_pause_meets_gone():
    paused = replace(FRESH, state=PAUSED)

    assert observe(health=paused, answers=[answer(Signal.GONE)], now=NOW, policy=POLICY).state == PAUSED
