"""A lane: its counters as the sender tells it what happened, its pace at the rate it learnt from 429s without
Retry-After (turns, what it holds), and what each answer teaches."""

import uuid
from datetime import UTC, datetime

import pytest

from delivery.models import AttemptOutcome
from delivery.receivers.protocol import ClaimedDelivery, SendResult
from delivery.rules.answers import signal_of
from delivery.rules.limit import AdaptiveLimit
from delivery.worker.lane import PACE_CATCH_UP, PACED_HOLD_FOR, RATE_HORIZON, Lane

NOW = datetime(2025, 3, 8, 12, 0, tzinfo=UTC)


def lane() -> Lane:
    return Lane(
        key="x",
        endpoint_id=1,
        url="http://receiver.test/webhook",
        name="receiver",
        limit=AdaptiveLimit(initial=64),
    )


def paced_at(rate: float, *, last_turn_mono: float = 10.0) -> Lane:
    """A lane that learnt `rate` and whose last request took its turn at `last_turn_mono`."""
    paced = lane()
    paced.rate.rate = rate
    paced.last_turn_mono = last_turn_mono
    return paced


def take_turn(lane: Lane, now_mono: float) -> None:
    """A request goes to the sender and begins at once, at `now_mono`."""
    lane.started(delivery())
    lane.begun(now_mono)


def delivery(*, probe: bool = False) -> ClaimedDelivery:
    return ClaimedDelivery(
        id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        idempotency_key="event-0123456789abcdef",
        endpoint_key="x",
        body="{}",
        attempt=1,
        max_attempts=8,
        probe=probe,
    )


def answer(status: int, *, started_mono: float = 10.0, retry_after: float | None = None) -> SendResult:
    outcome = AttemptOutcome.DELIVERED if status == 200 else AttemptOutcome.TRANSIENT_FAILURE
    return SendResult(
        delivery=delivery(),
        outcome=outcome,
        # As the HTTP transport reads the status (delivery.receivers.transport).
        signal=signal_of(outcome=outcome, status_code=status, retry_after=retry_after),
        started_at=NOW,
        finished_at=NOW,
        duration_ms=1,
        status_code=status,
        retry_after=retry_after,
        started_mono=started_mono,
    )


# -- counters: what the sender tells a lane ------------------------------------------------------------------------


def apply(lane: Lane, events: list[str]) -> None:
    """Tell `lane` what happened, in order: `started`/`probe started` hand it a delivery (the last one handed is
    the one the next event is about), `begun`, `finished`, `cancelled` (before it began), `missed` (its rate slot)."""
    current = None
    for event in events:
        if event in ("started", "probe started"):
            current = delivery(probe=event == "probe started")
            lane.started(current)
        elif event == "begun":
            lane.begun(10.0)
        elif event == "finished":
            lane.finished(current, begun=True)
        elif event == "cancelled":
            lane.finished(current, begun=False)
        elif event == "missed":
            lane.missed(current)
        else:
            raise ValueError(event)


@pytest.mark.parametrize(
    "events, open_, not_begun, probing, waiting",
    [
        ([], 0, 0, False, 0),
        # handed to the sender: open at once, not begun until its waits are over
        (["started"], 1, 1, False, 0),
        (["started", "begun"], 1, 0, False, 0),
        (["started", "begun", "finished"], 0, 0, False, 0),
        (["started", "started", "begun"], 2, 1, False, 0),
        # cancelled by a drain before it began: nothing open, nothing waiting (the drain hands it back)
        (["started", "cancelled"], 0, 0, False, 0),
        # late for its rate slot's second: not sent, first in line again
        (["started", "missed"], 0, 0, False, 1),
        # a probe: one at a time until it ends, however it ends
        (["probe started"], 1, 1, True, 0),
        (["probe started", "begun"], 1, 0, True, 0),
        (["probe started", "begun", "finished"], 0, 0, False, 0),
        (["probe started", "cancelled"], 0, 0, False, 0),
    ],
)
def test_a_lanes_counters_follow_what_the_sender_tells_it(events, open_, not_begun, probing, waiting):
    counted = lane()

    apply(counted, events)

    assert (counted.open, counted.not_begun, counted.probing, len(counted.waiting)) == (
        open_,
        not_begun,
        probing,
        waiting,
    )


def test_a_delivery_that_missed_its_slot_goes_before_the_others_waiting():
    counted = lane()
    first, second = delivery(), delivery()
    counted.waiting.append(second)
    counted.started(first)

    counted.missed(first)

    assert list(counted.waiting) == [first, second]


@pytest.mark.parametrize(
    "limit, share, usable_until, open_, now, may_start",
    [
        (4, None, float("inf"), 3, 10.0, True),
        (4, None, float("inf"), 4, 10.0, False),  # the lane's own limit
        (4, 2, float("inf"), 2, 10.0, False),  # its share of the fleet's max in flight
        (4, 3, 11.0, 2, 10.0, True),
        # a share is not used to start a request that could outlive the permit counting it
        (4, 3, 11.0, 2, 11.0, False),
    ],
)
def test_what_a_lane_may_start_is_bounded_by_its_limit_its_share_and_the_shares_term(
    limit, share, usable_until, open_, now, may_start
):
    counted = lane()
    counted.limit = AdaptiveLimit(initial=limit)
    counted.grant_share(share, usable_until_mono=usable_until)
    for _ in range(open_):
        counted.started(delivery())
    counted.waiting.append(delivery())

    assert counted.may_start(now) is may_start


# -- turns ------------------------------------------------------------------------------------------------------


def test_with_no_rate_learnt_every_request_has_its_turn_at_once():
    unpaced = lane()

    for _ in range(100):
        assert unpaced.turn_in(10.0) == 0.0
        take_turn(unpaced, 10.0)

    assert unpaced.may_hand_over()


def test_under_a_learned_rate_turns_are_one_over_the_rate_apart():
    paced = paced_at(50.0, last_turn_mono=10.0)

    assert paced.turn_in(10.0) == pytest.approx(0.02)
    assert paced.turn_in(10.015) == pytest.approx(0.005)
    assert paced.turn_in(10.02) == 0.0


@pytest.mark.parametrize(
    "away, turns_at_once",
    [
        # back after 60 ms: the turns missed (at 50/s, two) go at once, with the one due now
        (0.06, 3),
        # back after a second: only PACE_CATCH_UP's worth (five) and the one due now, not fifty
        (1.0, int(PACE_CATCH_UP * 50) + 1),
    ],
)
def test_turns_missed_while_away_from_the_loop_are_taken_up_to_the_catch_up_and_no_more(away, turns_at_once):
    paced = paced_at(50.0, last_turn_mono=10.0)
    back = 10.0 + away

    taken = 0
    while paced.turn_in(back) < 1e-9:
        take_turn(paced, back)
        taken += 1

    assert taken == turns_at_once


def test_the_first_refusal_paces_from_the_last_start_rather_than_letting_a_catch_up_burst_go():
    # Given a lane sending unpaced, its last request started at t=10
    learning = lane()
    take_turn(learning, 10.0)

    # When the receiver refuses it, before any answer told a rate: one a second, to begin with
    learning.learn_from(
        answer(429, started_mono=10.0), open_at_start=1, finished_mono=10.001, waited_for_turn=False
    )

    assert learning.rate.current == 1.0
    assert learning.turn_in(10.001) == pytest.approx(0.999)


def test_a_cut_makes_the_next_turn_later_for_a_request_already_waiting():
    paced = paced_at(100.0, last_turn_mono=10.0)
    assert paced.turn_in(10.0) == pytest.approx(0.01)

    paced.rate.rate = 50.0

    assert paced.turn_in(10.0) == pytest.approx(0.02)


# -- what a paced lane holds ------------------------------------------------------------------------------------


def test_under_a_learned_rate_about_a_horizon_of_requests_waits_for_its_turn_at_once():
    paced = paced_at(40.0)

    for _ in range(int(40.0 * RATE_HORIZON) - 1):
        paced.started(delivery())
    assert paced.may_hand_over()
    paced.started(delivery())
    assert not paced.may_hand_over()


def test_under_a_learned_rate_a_lane_holds_what_it_starts_within_the_hold_and_no_batch_more():
    paced, unpaced = paced_at(40.0), lane()

    assert unpaced.room(batch_size=200) == 64 + 200
    assert paced.room(batch_size=200) == 40 * PACED_HOLD_FOR
    paced.waiting.extend(delivery() for _ in range(30))
    assert paced.room(batch_size=200) == 40 * PACED_HOLD_FOR - 30


# -- what each answer teaches -----------------------------------------------------------------------------------


def test_a_429_without_retry_after_teaches_a_rate_and_leaves_the_concurrency_alone():
    learning = lane()

    learning.learn_from(answer(429), open_at_start=64, finished_mono=10.001, waited_for_turn=False)

    assert learning.rate.current is not None
    assert learning.limit.current == 64
    assert learning.blocked_until_mono == 0.0


def test_a_429_with_retry_after_halves_the_concurrency_and_blocks_the_lane_but_teaches_no_rate():
    learning = lane()

    learning.learn_from(
        answer(429, retry_after=3.0), open_at_start=64, finished_mono=10.001, waited_for_turn=False
    )

    assert learning.rate.current is None
    assert learning.limit.current == 32
    assert learning.blocked_until_mono == pytest.approx(13.001)


def test_an_accepted_answer_the_rate_held_back_grows_the_rate_and_counts_for_the_concurrency():
    learning = paced_at(40.0)
    learning.rate.slow_start = False
    learning.waiting.extend(delivery() for _ in range(10))

    learning.learn_from(answer(200), open_at_start=64, finished_mono=10.25, waited_for_turn=True)

    assert learning.rate.current > 40.0
    # slow start of the window: the whole limit was in use, and deliveries waited behind it
    assert learning.limit.current == 65


@pytest.mark.parametrize("waiting, limit", [(0, 64), (1, 65)])
def test_an_accepted_answer_grows_the_concurrency_only_if_deliveries_waited_behind_it(waiting, limit):
    # At a fast receiver (10 ms), with every delivery in hand already open, a larger limit would open nothing more.
    learning = lane()
    learning.waiting.extend(delivery() for _ in range(waiting))

    learning.learn_from(answer(200), open_at_start=64, finished_mono=10.01, waited_for_turn=False)

    assert learning.limit.current == limit


# -- what a lane holds when its rate falls --------------------------------------------------------------------------


def test_a_lane_whose_learnt_rate_fell_hands_back_what_it_holds_beyond_twice_its_hold_down_to_its_hold():
    # It claimed 100 before learning that its share of the receiver's limit is 2 a second.
    paced = paced_at(2.0)
    claimed = [delivery() for _ in range(100)]
    paced.waiting.extend(claimed)

    handed_back = paced.take_excess()

    assert len(paced.waiting) == paced.held_at_most() == 2
    assert list(paced.waiting) == claimed[:2]  # the first claimed keep their turns
    assert {d.id for d in handed_back} == {d.id for d in claimed[2:]}


@pytest.mark.parametrize("held", [0, 2, 4])
def test_a_lane_holding_at_most_twice_its_hold_or_with_no_rate_learnt_keeps_everything(held):
    paced = paced_at(2.0)
    paced.waiting.extend(delivery() for _ in range(held))
    unpaced = lane()
    unpaced.waiting.extend(delivery() for _ in range(100))

    assert paced.take_excess() == [] and len(paced.waiting) == held
    assert unpaced.take_excess() == [] and len(unpaced.waiting) == 100
