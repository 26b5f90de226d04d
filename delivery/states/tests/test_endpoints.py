"""The Endpoint state machine and the fleet's shared limits, against the real database."""

import logging
import math
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.models import Endpoint, EndpointPermit, EndpointState
from delivery.rules.answers import Signal
from delivery.rules.health import Answer, HealthPolicy
from delivery.rules.pace import SPAN
from delivery.rules.retry import RetryPolicy
from delivery.states.endpoints import (
    EndpointActor,
    endpoint_pause,
    endpoint_record_answers,
    endpoint_release_shares,
    endpoint_resume,
    endpoint_return_probe,
    endpoint_share_in_flight,
    endpoint_take_probe,
    endpoint_take_rate_slots,
    endpoint_transition,
)
from delivery.tests.pipeline import endpoint_columns, key_of
from scheduling.exceptions import InvalidStateTransition

pytestmark = pytest.mark.django_db

HEALTHY, FAILING, PAUSED = EndpointState.HEALTHY, EndpointState.FAILING, EndpointState.PAUSED
URL = "https://receiver.example/hooks"
KEY = key_of(URL)
POLICY = HealthPolicy(
    failure_threshold=3,
    probe_first_interval=timedelta(seconds=2),
    probe_max_interval=timedelta(seconds=60),
    retry=RetryPolicy(base=timedelta(seconds=10), cap=timedelta(hours=1)),
)
LEASE = timedelta(seconds=30)


def answers(signal: Signal, count: int, *, probe: bool = False) -> list[Answer]:
    now = timezone.now()
    return [
        Answer(
            signal=signal,
            started_at=now - timedelta(seconds=1),
            finished_at=now + timedelta(milliseconds=i),
            description=f"HTTP 503 #{i}",
            probe=probe,
        )
        for i in range(count)
    ]


def failing_endpoint(
    *, next_probe_in: timedelta = timedelta(0), interval: timedelta = timedelta(seconds=4)
) -> Endpoint:
    now = timezone.now()
    return Endpoint.objects.create(
        **endpoint_columns(URL),
        state=FAILING,
        consecutive_failures=POLICY.failure_threshold,
        failing_since=now - timedelta(minutes=1),
        next_probe_at=now + next_probe_in,
        probe_interval=interval,
    )


@pytest.fixture
def endpoint():
    return Endpoint.objects.create(**endpoint_columns(URL))


# -- endpoint_record_answers --------------------------------------------------------------------------------------


def test_failures_below_the_threshold_are_counted_in_the_row_and_leave_it_healthy(endpoint):
    verdict = endpoint_record_answers(
        key=KEY, answers=answers(Signal.FAILURE, 2), now=timezone.now(), policy=POLICY
    )

    endpoint.refresh_from_db()
    assert (endpoint.state, endpoint.consecutive_failures, endpoint.last_error) == (HEALTHY, 2, "HTTP 503 #1")
    assert not verdict.down


def test_the_threshold_of_failures_over_two_batches_makes_the_endpoint_failing_and_says_so(endpoint, caplog):
    endpoint_record_answers(key=KEY, answers=answers(Signal.FAILURE, 2), now=timezone.now(), policy=POLICY)
    now = timezone.now()

    with caplog.at_level(logging.WARNING, logger="delivery.states.endpoints"):
        verdict = endpoint_record_answers(key=KEY, answers=answers(Signal.FAILURE, 1), now=now, policy=POLICY)

    endpoint.refresh_from_db()
    assert (endpoint.state, endpoint.consecutive_failures) == (FAILING, 3)
    assert (endpoint.failing_since, endpoint.next_probe_at) == (now, now + POLICY.probe_first_interval)
    assert verdict.down and verdict.health.state == FAILING
    logged = [r for r in caplog.records if r.getMessage().startswith("Endpoint failing")]
    # Named by its redacted form and id, never by the URL (a credential).
    assert len(logged) == 1 and (logged[0].endpoint, logged[0].endpoint_id) == (
        "https://receiver.example/…",
        endpoint.pk,
    )
    assert URL not in caplog.text


def test_answers_for_an_endpoint_gone_meanwhile_are_weighed_as_a_healthy_ones_and_write_nothing():
    # Its destination's URL changed while they were in flight: the old receiver's row went with it.
    verdict = endpoint_record_answers(
        key=KEY, answers=answers(Signal.FAILURE, 1), now=timezone.now(), policy=POLICY
    )

    assert (verdict.health.state, verdict.health.consecutive_failures, verdict.down) == (HEALTHY, 1, False)
    assert not Endpoint.objects.exists()


def test_a_successful_probe_makes_a_failing_endpoint_healthy_again(caplog):
    endpoint = failing_endpoint()

    with caplog.at_level(logging.INFO, logger="delivery.states.endpoints"):
        verdict = endpoint_record_answers(
            key=KEY, answers=answers(Signal.SUCCESS, 1, probe=True), now=timezone.now(), policy=POLICY
        )

    endpoint.refresh_from_db()
    assert (endpoint.state, endpoint.consecutive_failures) == (HEALTHY, 0)
    assert (endpoint.failing_since, endpoint.next_probe_at, endpoint.probe_interval) == (None, None, None)
    assert endpoint.last_success_at is not None
    assert not verdict.down
    assert any(r.getMessage().startswith("Endpoint healthy again") for r in caplog.records)


def test_a_failed_probe_pushes_the_next_one_back_by_the_interval_and_doubles_it():
    endpoint = failing_endpoint(interval=timedelta(seconds=8))
    now = timezone.now()

    endpoint_record_answers(key=KEY, answers=answers(Signal.FAILURE, 1, probe=True), now=now, policy=POLICY)

    endpoint.refresh_from_db()
    assert endpoint.state == FAILING
    assert (endpoint.next_probe_at, endpoint.probe_interval) == (
        now + timedelta(seconds=8),
        timedelta(seconds=16),
    )


# -- operator's pause and resume ----------------------------------------------------------------------------------


def test_pause_holds_a_healthy_endpoint_and_names_the_operator(endpoint):
    paused = endpoint_pause(endpoint=endpoint, operator="ops-alice")

    assert (paused.state, paused.paused_by) == (PAUSED, "ops-alice")
    assert paused.paused_at is not None


def test_pause_of_a_failing_endpoint_clears_its_probe_schedule():
    endpoint = failing_endpoint()

    paused = endpoint_pause(endpoint=endpoint, operator="ops-alice")

    assert paused.state == PAUSED
    assert (paused.failing_since, paused.next_probe_at, paused.probe_interval) == (None, None, None)


def test_pause_of_a_paused_endpoint_is_refused(endpoint):
    endpoint_pause(endpoint=endpoint, operator="ops-alice")

    with pytest.raises(InvalidStateTransition, match="already paused"):
        endpoint_pause(endpoint=endpoint, operator="ops-bob")

    assert Endpoint.objects.get(pk=endpoint.pk).paused_by == "ops-alice"


def test_resume_makes_a_paused_endpoint_healthy_with_a_clean_slate(endpoint):
    endpoint_pause(endpoint=endpoint, operator="ops-alice")
    Endpoint.objects.filter(pk=endpoint.pk).update(
        consecutive_failures=9, blocked_until=timezone.now() + timedelta(minutes=5)
    )

    resumed = endpoint_resume(endpoint=endpoint, operator="ops-bob")

    assert (resumed.state, resumed.paused_by, resumed.paused_at) == (HEALTHY, "", None)
    assert (resumed.consecutive_failures, resumed.blocked_until) == (0, None)


@pytest.mark.parametrize("make", [lambda: Endpoint.objects.create(**endpoint_columns(URL)), failing_endpoint])
def test_resume_of_an_endpoint_that_is_not_paused_is_refused(make):
    endpoint = make()
    state = endpoint.state

    with pytest.raises(InvalidStateTransition, match="neither paused nor gone"):
        endpoint_resume(endpoint=endpoint, operator="ops-bob")

    assert Endpoint.objects.get(pk=endpoint.pk).state == state


@pytest.mark.parametrize(
    "source, target, actor",
    [
        (PAUSED, HEALTHY, EndpointActor.WORKER),  # only an operator resumes
        (PAUSED, HEALTHY, EndpointActor.PROBE),
        (HEALTHY, FAILING, EndpointActor.OPERATOR),  # only the workers' answers make it failing
        (FAILING, HEALTHY, EndpointActor.WORKER),  # only a success (the probe) ends a failure
        (PAUSED, FAILING, EndpointActor.WORKER),
    ],
)
def test_a_move_by_the_wrong_actor_is_refused_and_changes_nothing(endpoint, source, target, actor):
    now = timezone.now()
    Endpoint.objects.filter(pk=endpoint.pk).update(
        state=source, paused_at=now, failing_since=now, next_probe_at=now, probe_interval=timedelta(seconds=4)
    )

    with pytest.raises(InvalidStateTransition):
        endpoint_transition(endpoint_id=endpoint.pk, source=source, target=target, actor=actor)

    assert Endpoint.objects.get(pk=endpoint.pk).state == source


# -- the probe ----------------------------------------------------------------------------------------------------


def test_the_probe_goes_to_one_caller_until_its_lease_expires():
    endpoint = failing_endpoint()
    now = timezone.now()

    won = [endpoint_take_probe(endpoint_id=endpoint.pk, now=now, lease=LEASE) for _ in range(3)]
    before_expiry = endpoint_take_probe(
        endpoint_id=endpoint.pk, now=now + LEASE - timedelta(seconds=1), lease=LEASE
    )
    after_expiry = endpoint_take_probe(endpoint_id=endpoint.pk, now=now + LEASE, lease=LEASE)

    assert won == [True, False, False]
    assert (before_expiry, after_expiry) == (False, True)


def test_a_returned_probe_can_be_taken_again_after_the_current_interval():
    endpoint = failing_endpoint(interval=timedelta(seconds=4))
    now = timezone.now()
    assert endpoint_take_probe(endpoint_id=endpoint.pk, now=now, lease=LEASE)

    endpoint_return_probe(endpoint_id=endpoint.pk, now=now)

    assert not endpoint_take_probe(endpoint_id=endpoint.pk, now=now + timedelta(seconds=3), lease=LEASE)
    assert endpoint_take_probe(endpoint_id=endpoint.pk, now=now + timedelta(seconds=4), lease=LEASE)


def test_no_probe_before_its_time_nor_for_an_endpoint_that_is_not_failing(endpoint):
    now = timezone.now()
    not_yet = Endpoint.objects.create(
        **endpoint_columns("https://later.example/h"),
        state=FAILING,
        failing_since=now,
        next_probe_at=now + timedelta(seconds=2),
        probe_interval=timedelta(seconds=4),
    )

    assert not endpoint_take_probe(endpoint_id=endpoint.pk, now=now, lease=LEASE)  # HEALTHY
    assert not endpoint_take_probe(endpoint_id=not_yet.pk, now=now, lease=LEASE)


# -- the fleet's rate: slots ----------------------------------------------------------------------------------------


def test_rate_slots_taken_by_two_workers_in_turns_hold_no_more_than_the_rate_in_any_second(endpoint):
    # Given two workers taking a quarter second's worth of a 10/s cap each, in turns, over about three seconds
    now = float(math.floor(time.time()) + 10)  # a second's start: the first slot is now's
    slots = []
    for turn in range(12):
        slots += endpoint_take_rate_slots(endpoint_id=endpoint.pk, want=3, rate=10.0, now=now + turn * 0.25)

    # Then every calendar second held at most ten of them, each before its deadline, the first the one due next
    assert slots[0].at == now
    per_second = Counter(int(slot.at) for slot in slots)
    assert max(per_second.values()) <= 10
    assert all(slot.at < slot.deadline == int(slot.at) + SPAN for slot in slots)
    row = Endpoint.objects.get(pk=endpoint.pk)
    assert row.rate_second == int(slots[-1].at)


def test_an_idle_endpoint_saves_no_burst_for_later(endpoint):
    now = time.time()
    endpoint_take_rate_slots(endpoint_id=endpoint.pk, want=5, rate=10.0, now=now)
    later = math.floor(now) + 60.5

    first = endpoint_take_rate_slots(endpoint_id=endpoint.pk, want=5, rate=10.0, now=later)

    # the slots of the half second that passed are gone: the first left is the one due next, not the second's first
    passed = math.ceil(0.5 * 10 / SPAN)
    assert [slot.at for slot in first] == pytest.approx(
        [later - 0.5 + (passed + i) * SPAN / 10 for i in range(10 - passed)]
    )


# -- the fleet's in-flight cap: shares ------------------------------------------------------------------------------


def share(endpoint, worker, *, want=100, holding=0, cap=12, now=None):
    return endpoint_share_in_flight(
        endpoint_id=endpoint.pk,
        worker=worker,
        want=want,
        holding=holding,
        cap=cap,
        lease=LEASE,
        now=now or timezone.now(),
    )


def held(endpoint) -> dict[str, int]:
    return dict(EndpointPermit.objects.filter(endpoint=endpoint).values_list("worker", "permits"))


def test_requests_still_open_after_a_share_shrinks_are_not_granted_to_a_newcomer(endpoint):
    # Given w1 alone with the whole cap of 12, all 12 open, when w2 arrives
    assert share(endpoint, "w1", cap=12) == 12
    assert share(endpoint, "w2", cap=12) == 0
    # When w1 renews: its share is halved, but its 12 requests are still open
    assert share(endpoint, "w1", holding=12, cap=12) == 6
    # Then w2 gets nothing until they have ended and w1 renews again
    assert share(endpoint, "w2", cap=12) == 0
    assert share(endpoint, "w1", holding=4, cap=12) == 6
    assert share(endpoint, "w2", cap=12) == 6
    assert sum(held(endpoint).values()) <= 12


def test_a_lone_worker_gets_the_whole_cap_or_what_it_wants(endpoint):
    assert share(endpoint, "w1", want=100, cap=12) == 12
    assert share(endpoint, "w1", want=5, cap=12) == 5


@pytest.mark.parametrize("cap, workers", [(12, 3), (10, 3), (7, 2), (5, 5)])
def test_live_workers_settle_on_equal_shares_that_never_exceed_the_cap(endpoint, cap, workers):
    names = [f"w{i}" for i in range(workers)]
    for _ in range(3):  # each renews its share in turn, as the workers' loops do
        for name in names:
            share(endpoint, name, cap=cap)
            assert sum(held(endpoint).values()) <= cap

    fair = math.ceil(cap / workers)
    shares = held(endpoint)
    assert set(shares) == set(names)
    assert max(shares.values()) == fair
    assert sum(shares.values()) == cap  # nothing left idle once every worker renewed


def test_a_newcomer_gets_its_part_as_the_others_renew(endpoint):
    assert share(endpoint, "w1", cap=12) == 12
    assert share(endpoint, "w2", cap=12) == 0  # w1 holds it all, for now

    assert share(endpoint, "w1", cap=12) == 6
    assert share(endpoint, "w2", cap=12) == 6


def test_a_dead_workers_expired_share_returns_to_the_others(endpoint):
    now = timezone.now()
    share(endpoint, "w1", cap=12, now=now)
    share(endpoint, "w2", cap=12, now=now)

    granted = share(endpoint, "w2", cap=12, now=now + LEASE)  # w1 stopped renewing

    assert granted == 12
    assert held(endpoint) == {"w2": 12}


def test_a_stopping_worker_releases_its_shares_of_every_endpoint_at_once(endpoint):
    other = Endpoint.objects.create(**endpoint_columns("https://other.example/h"))
    share(endpoint, "w1", cap=12)
    share(other, "w1", cap=12)
    share(endpoint, "w2", cap=12)

    endpoint_release_shares(worker="w1")

    assert EndpointPermit.objects.filter(worker="w1").count() == 0
    assert held(endpoint) == {"w2": 0}
    assert share(endpoint, "w2", cap=12) == 12


# -- gone ---------------------------------------------------------------------------------------------------------

GONE = EndpointState.GONE


def gone_answer() -> list[Answer]:
    now = timezone.now()
    return [
        Answer(
            signal=Signal.GONE, started_at=now, finished_at=now, description="HTTP 404 (channel_not_found)"
        )
    ]


def test_a_gone_answer_moves_the_endpoint_to_gone_and_logs_it_as_an_error(endpoint, caplog):
    with caplog.at_level(logging.ERROR, logger="delivery.states.endpoints"):
        verdict = endpoint_record_answers(key=KEY, answers=gone_answer(), now=timezone.now(), policy=POLICY)

    endpoint.refresh_from_db()
    assert (endpoint.state, endpoint.last_error) == (GONE, "HTTP 404 (channel_not_found)")
    assert verdict.down
    assert any("Endpoint gone" in r.getMessage() for r in caplog.records)


def test_an_operator_resumes_a_gone_endpoint_to_healthy_and_may_pause_it_meanwhile(endpoint):
    endpoint_record_answers(key=KEY, answers=gone_answer(), now=timezone.now(), policy=POLICY)

    paused = endpoint_pause(endpoint=endpoint, operator="ops")
    assert paused.state == PAUSED
    resumed = endpoint_resume(endpoint=paused, operator="ops")
    assert resumed.state == HEALTHY

    endpoint_record_answers(key=KEY, answers=gone_answer(), now=timezone.now(), policy=POLICY)
    assert endpoint_resume(endpoint=endpoint, operator="ops").state == HEALTHY


def test_only_the_worker_moves_an_endpoint_to_gone_and_only_the_operator_out_of_it(endpoint):
    with pytest.raises(InvalidStateTransition):
        endpoint_transition(
            endpoint_id=endpoint.pk, source=HEALTHY, target=GONE, actor=EndpointActor.OPERATOR
        )
    assert endpoint_transition(
        endpoint_id=endpoint.pk, source=HEALTHY, target=GONE, actor=EndpointActor.WORKER
    )
    with pytest.raises(InvalidStateTransition):
        endpoint_transition(endpoint_id=endpoint.pk, source=GONE, target=HEALTHY, actor=EndpointActor.PROBE)
    with pytest.raises(InvalidStateTransition):
        endpoint_transition(endpoint_id=endpoint.pk, source=GONE, target=FAILING, actor=EndpointActor.WORKER)
