"""The adaptive concurrency limit, sample by sample: slow start, additive growth, cuts, bounds."""

import math

import pytest

from delivery.limit import AdaptiveLimit, FixedLimit

FAST = 0.1  # seconds: the latency every sample has unless a test says otherwise


def success(
    limit: AdaptiveLimit, *, at: float = 0.0, latency: float = FAST, in_flight: int | None = None
) -> None:
    """One successful sample; by default the whole limit was in use (the limit held the worker back)."""
    limit.on_sample(
        started=at,
        finished=at + latency,
        dropped=False,
        in_flight=limit.current if in_flight is None else in_flight,
    )


def drop(limit: AdaptiveLimit, *, at: float = 0.0, latency: float = FAST) -> None:
    limit.on_sample(started=at, finished=at + latency, dropped=True, in_flight=limit.current)


def after_one_cut(initial: int, **options) -> AdaptiveLimit:
    """A limit out of slow start: one drop halved `initial`, and the next samples start after that cut."""
    limit = AdaptiveLimit(initial=initial, **options)
    drop(limit, at=0.0)
    return limit


# -- bounds -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "initial, minimum, maximum, expected",
    [(16, 1, 2000, 16), (0, 4, 2000, 4), (5000, 1, 2000, 2000)],
)
def test_the_initial_limit_is_held_within_the_minimum_and_the_maximum(initial, minimum, maximum, expected):
    assert AdaptiveLimit(initial=initial, minimum=minimum, maximum=maximum).current == expected


def test_growth_stops_at_the_maximum():
    limit = AdaptiveLimit(initial=9, maximum=10)

    for _ in range(5):
        success(limit)

    assert limit.current == 10
    assert limit.limit == 10.0


def test_cuts_stop_at_the_minimum():
    limit = AdaptiveLimit(initial=3, minimum=2)

    for second in range(5):
        drop(limit, at=10.0 * second)  # each drop starts after the last cut: every one cuts

    assert limit.current == 2


# -- slow start -------------------------------------------------------------------------------------------------


def test_in_slow_start_every_success_adds_one():
    limit = AdaptiveLimit(initial=16)

    for _ in range(16):
        success(limit)

    assert limit.current == 32  # one round trip of 16 successes doubled it
    assert limit.slow_start


def test_slow_start_lasts_until_the_first_cut_then_growth_is_additive():
    limit = AdaptiveLimit(initial=200)
    success(limit)
    assert limit.limit == 201.0

    drop(limit, at=1.0)
    assert limit.limit == 100.5
    assert not limit.slow_start

    success(limit, at=2.0)

    # sqrt(limit) / limit a success: one round trip of `limit` successes adds about sqrt(limit)
    assert limit.limit == pytest.approx(100.5 + math.sqrt(100.5) / 100.5)


def test_additive_growth_adds_about_the_square_root_of_the_limit_per_round_trip():
    limit = after_one_cut(initial=200)  # 100, out of slow start

    for _ in range(100):
        success(limit, at=1.0)

    assert 109.5 < limit.limit < 110.5


# -- growth only when the limit held the worker back -----------------------------------------------------------


@pytest.mark.parametrize("in_flight, grows", [(8, True), (16, True), (7, False), (1, False)])
def test_a_success_grows_the_limit_only_if_at_least_half_of_it_was_in_use(in_flight, grows):
    limit = AdaptiveLimit(initial=16)

    success(limit, in_flight=in_flight)

    assert limit.limit == (17.0 if grows else 16.0)


# -- multiplicative decrease ------------------------------------------------------------------------------------


def test_a_drop_halves_the_limit():
    limit = AdaptiveLimit(initial=64)

    drop(limit)

    assert limit.current == 32


def test_latency_above_twice_the_best_plus_the_margin_cuts_a_tenth():
    # Given a best latency of 100 ms: the line is 2 x 0.1 + 0.05 = 0.25 s
    limit = AdaptiveLimit(initial=100)
    success(limit, latency=0.1, in_flight=0)  # sets the best, grows nothing

    success(limit, at=1.0, latency=0.3)

    assert limit.limit == pytest.approx(90.0)
    assert not limit.slow_start


def test_latency_below_the_line_is_not_congestion_and_grows_the_limit():
    limit = AdaptiveLimit(initial=100)
    success(limit, latency=0.1, in_flight=0)

    success(limit, at=1.0, latency=0.24)  # under 2 x 0.1 + 0.05

    assert limit.limit == 101.0


def test_the_margin_keeps_a_very_fast_receivers_jitter_from_cutting():
    # Given a 1 ms best: 10 ms is ten times the best but within the 50 ms margin
    limit = AdaptiveLimit(initial=100)
    success(limit, latency=0.001, in_flight=0)

    success(limit, at=1.0, latency=0.01)

    assert limit.limit == 101.0


def test_a_faster_sample_becomes_the_best():
    limit = AdaptiveLimit()
    success(limit, latency=0.5, in_flight=0)

    success(limit, latency=0.2, in_flight=0)

    assert limit.best_latency == 0.2


# -- one cut per round trip -------------------------------------------------------------------------------------


def test_a_wall_of_failures_from_requests_started_before_the_cut_counts_as_one_cut():
    # Given 100 requests open at t=0 that all time out, answered between t=10.0 and t=10.99
    limit = AdaptiveLimit(initial=128)

    for i in range(100):
        limit.on_sample(started=0.0, finished=10.0 + i / 100, dropped=True, in_flight=100)

    assert limit.current == 64


def test_a_drop_of_a_request_started_after_the_last_cut_cuts_again():
    limit = AdaptiveLimit(initial=128)
    limit.on_sample(started=0.0, finished=10.0, dropped=True, in_flight=100)

    limit.on_sample(started=10.5, finished=11.0, dropped=True, in_flight=64)

    assert limit.current == 32


def test_a_slow_success_started_before_the_last_cut_neither_cuts_nor_grows():
    limit = AdaptiveLimit(initial=128)
    success(limit, latency=0.1, in_flight=0)
    limit.on_sample(started=1.0, finished=2.0, dropped=True, in_flight=128)
    assert limit.limit == 64.0

    limit.on_sample(
        started=1.5, finished=3.0, dropped=False, in_flight=128
    )  # slow, but started before the cut

    assert limit.limit == 64.0


def test_a_latency_cut_also_counts_as_the_round_trips_one_cut():
    limit = AdaptiveLimit(initial=100)
    success(limit, latency=0.1, in_flight=0)
    success(limit, at=1.0, latency=1.0)  # latency cut at t=2.0
    assert limit.limit == pytest.approx(90.0)

    drop(limit, at=1.5)  # started before that cut

    assert limit.limit == pytest.approx(90.0)


# -- FixedLimit -------------------------------------------------------------------------------------------------


def test_a_fixed_limit_ignores_every_sample():
    limit = FixedLimit(limit=7)

    limit.on_sample(started=0.0, finished=30.0, dropped=True, in_flight=7)
    limit.on_sample(started=0.0, finished=0.01, dropped=False, in_flight=7)

    assert limit.current == 7
