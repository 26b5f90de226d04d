"""The fleet's rate cap in calendar seconds (delivery.rules.pace): how many slots a second holds, which a worker takes."""

import math
from collections import Counter

import pytest

from delivery.rules.pace import (
    GUARD,
    SPAN,
    RateSlot,
    RateWindow,
    rate_slots_take,
    second_with_slots,
    slots_in,
)

T = 1_700_000_000  # a calendar second


@pytest.mark.parametrize(
    "rate, seconds",
    [
        (100.0, [100, 100, 100, 100]),
        (1.0, [1, 1, 1, 1]),
        # a fractional rate: whole seconds in turn, never more than its ceiling in any one
        (2.5, [2, 3, 2, 3]),
        (0.5, [0, 1, 0, 1]),
        (0.25, [0, 0, 0, 1]),
    ],
)
def test_each_calendar_second_holds_the_rates_slots_and_any_run_of_seconds_at_most_its_ceiling(rate, seconds):
    assert [slots_in(T + i, rate) for i in range(4)] == seconds
    held = [slots_in(T + i, rate) for i in range(1000)]
    for run in (1, 2, 3, 7):
        busiest = max(sum(held[i : i + run]) for i in range(len(held) - run))
        assert busiest <= math.ceil(run * rate)


@pytest.mark.parametrize(
    "rate, second, expected",
    [(100.0, T, T), (0.5, T, T + 1), (0.5, T + 1, T + 1), (0.25, T, T + 3), (1 / 3600, T, 1_700_002_799)],
)
def test_the_next_second_with_a_slot_is_found_without_counting_the_empty_ones(rate, second, expected):
    found = second_with_slots(second, rate)

    assert found == expected
    assert slots_in(found, rate) > 0 and all(
        slots_in(s, rate) == 0 for s in range(second, min(found, second + 5))
    )


@pytest.mark.parametrize(
    "window, now, want, rate, expected_window, first_at, count",
    [
        # a quiet endpoint: the current second from its start, spread over its first SPAN
        (RateWindow(0), T + 0.0, 25, 100.0, RateWindow(T, 25), T + 0.0, 25),
        # the window moves on where another worker left it in this second
        (RateWindow(T, 25), T + 0.1, 25, 100.0, RateWindow(T, 50), T + 25 * SPAN / 100, 25),
        # the slots of this second that passed unused are gone: no burst makes up for them
        (RateWindow(T, 10), T + 50 * SPAN / 100, 25, 100.0, RateWindow(T, 75), T + 50 * SPAN / 100, 25),
        # fewer left than wanted: what is left of the second
        (RateWindow(T, 90), T + 0.1, 25, 100.0, RateWindow(T, 100), T + 90 * SPAN / 100, 10),
        # the second is full: the next one's first slots
        (RateWindow(T, 100), T + 0.5, 25, 100.0, RateWindow(T + 1, 25), T + 1.0, 25),
        # too late in the second for any slot (within its guard): the next second
        (RateWindow(T, 10), T + SPAN + 0.01, 25, 100.0, RateWindow(T + 1, 25), T + 1.0, 25),
        # a window left behind by a quiet while: the current second, from now
        (RateWindow(T - 60, 100), T + 0.0, 5, 100.0, RateWindow(T, 5), T + 0.0, 5),
        # already taken ahead (a full second): after it
        (RateWindow(T + 1, 100), T + 0.2, 5, 100.0, RateWindow(T + 2, 5), T + 2.0, 5),
        # at least one slot, whatever is asked
        (RateWindow(0), T + 0.0, 0, 100.0, RateWindow(T, 1), T + 0.0, 1),
        # below one a second: the next second that holds one
        (RateWindow(0), T + 0.2, 3, 0.5, RateWindow(T + 1, 1), T + 1.0, 1),
    ],
)
def test_a_worker_takes_consecutive_slots_of_one_second_none_before_now(
    window, now, want, rate, expected_window, first_at, count
):
    taken, slots = rate_slots_take(window=window, now=now, want=want, rate=rate)

    assert taken == expected_window
    assert len(slots) == count
    assert slots[0].at == pytest.approx(first_at)
    second = taken.second
    assert all(slot.deadline == second + SPAN and second <= slot.at < slot.deadline for slot in slots)
    assert all(slot.at >= now - 1e-9 for slot in slots)


def test_workers_taking_in_turns_never_get_more_than_a_seconds_slots_in_one_second():
    # Given four workers, each taking a quarter second's worth at a time as its slots run out, for ten seconds
    rate, window = 100.0, RateWindow(0)
    slots: list[RateSlot] = []
    for worker in range(400):
        now = T + worker * 0.02
        window, taken = rate_slots_take(window=window, now=now, want=25, rate=rate)
        slots.extend(taken)

    # Then no second holds more than the rate, and every slot starts within its second before the guard
    per_second = Counter(math.floor(slot.at) for slot in slots)
    assert max(per_second.values()) == 100
    assert all(slot.deadline - math.floor(slot.at) == pytest.approx(1 - GUARD) for slot in slots)
    assert all(slot.at < slot.deadline for slot in slots)
