"""The adaptive concurrency limit, sample by sample: slow start, additive growth, cuts, bounds."""

import math

import pytest

from delivery.rules.limit import AdaptiveLimit, FixedLimit, LearnedRate

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


@pytest.mark.parametrize(
    "slow_start, latency, held_back, grows",
    [
        (True, 0.01, True, True),
        (True, 0.01, False, False),
        (False, 0.01, True, True),
        (False, 0.01, False, False),
        # A slow receiver (best latency 0.1 s or more) grows it either way: its slow start must double.
        (True, 0.1, False, True),
        (False, 1.0, False, True),
    ],
)
def test_at_a_fast_receiver_a_success_grows_the_limit_only_if_deliveries_waited_behind_it(
    slow_start, latency, held_back, grows
):
    # Nothing waiting: every delivery in hand is open already, and a larger limit would open nothing more
    # (at a fast receiver it only let whole claimed batches go out in one burst).
    limit = AdaptiveLimit(initial=16) if slow_start else after_one_cut(initial=32)
    before = limit.limit

    limit.on_sample(
        started=1.0, finished=1.0 + latency, dropped=False, in_flight=limit.current, held_back=held_back
    )

    assert (limit.limit > before) == grows


def test_a_limit_that_held_nothing_back_still_cuts():
    limit = AdaptiveLimit(initial=100)
    limit.on_sample(started=0.0, finished=0.1, dropped=False, in_flight=0, held_back=False)  # best: 100 ms

    limit.on_sample(started=1.0, finished=1.3, dropped=False, in_flight=100, held_back=False)
    assert limit.current == 90
    limit.on_sample(started=2.0, finished=2.1, dropped=True, in_flight=90, held_back=False)
    assert limit.current == 45


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


# -- LearnedRate ------------------------------------------------------------------------------------------------

LATENCY = 0.25  # seconds: how long an accepted request takes unless a test says otherwise


def accepted(rate: LearnedRate, *, at: float, latency: float = LATENCY, waited: bool = True) -> None:
    """A request started at `at` and accepted; by default it waited for its turn at the rate."""
    rate.on_start()
    rate.on_answer(started_mono=at, finished_mono=at + latency, refused=False, waited=waited)


def refused(rate: LearnedRate, *, at: float) -> None:
    """A request started at `at` and refused at once, as a limiter does."""
    rate.on_start()
    rate.on_answer(started_mono=at, finished_mono=at + 0.001, refused=True, waited=False)


def learned_at(value: float, *, cut_at: float = 0.0) -> LearnedRate:
    """A rate out of slow start at `value`, its last cut at `cut_at` (one accepted answer since)."""
    rate = LearnedRate()
    for i in range(rate.sample):  # 20 accepted, 10 ms apart: 100/s measured
        accepted(rate, at=cut_at - 1.0 + i / 100, waited=False)
    refused(rate, at=cut_at - 0.001)
    rate.rate = value
    return rate


def test_no_rate_is_learned_from_accepted_answers_alone():
    rate = LearnedRate()

    for i in range(100):
        accepted(rate, at=i / 100, waited=False)

    assert rate.current is None


@pytest.mark.parametrize(
    "accepted_before, spacing, expected_rate, slow_start",
    [
        # 20 accepted within the last 10 s, 10 ms apart: 100/s measured, 90/s learned
        (20, 0.01, 90.0, False),
        (50, 0.01, 90.0, False),
        # 20 accepted 0.1 s apart: 10/s measured
        (20, 0.1, 9.0, False),
        # fewer than 20 say too little: one a second, and slow start
        (19, 0.01, 1.0, True),
        (0, 0.01, 1.0, True),
        # 20, but most of them longer ago than 10 s
        (20, 1.0, 1.0, True),
    ],
)
def test_the_first_refusal_sets_the_rate_from_what_the_receiver_was_seen_to_accept(
    accepted_before, spacing, expected_rate, slow_start
):
    rate = LearnedRate()
    for i in range(accepted_before):
        accepted(rate, at=100.0 - (accepted_before - i) * spacing, latency=0.0, waited=False)

    refused(rate, at=100.0)

    assert rate.current == pytest.approx(expected_rate)
    assert rate.slow_start is slow_start


def test_in_slow_start_answers_from_before_the_first_refusal_add_one_over_their_latency_each():
    # Given a burst of 16 at t=0 whose refusals came back at once, before any acceptance
    rate = LearnedRate()
    refused(rate, at=0.0)
    assert rate.current == 1.0

    for _ in range(10):  # the burst's accepted requests answer 250 ms later
        rate.on_answer(started_mono=0.0, finished_mono=0.25, refused=False, waited=False)

    assert rate.current == pytest.approx(1.0 + 10 * 4.0)


@pytest.mark.parametrize(
    "waited, after_last_refusal, grows",
    [(True, True, True), (False, True, False), (True, False, False)],
)
def test_in_slow_start_a_paced_answer_grows_the_rate_only_if_the_rate_held_it_back_since_the_last_refusal(
    waited, after_last_refusal, grows
):
    rate = LearnedRate()
    refused(rate, at=0.0)
    before = rate.current
    refused(rate, at=0.5)  # not a cut (no evidence yet) but a refusal all the same
    started = 0.6 if after_last_refusal else 0.4

    accepted(rate, at=started, waited=waited)

    assert rate.current == pytest.approx(before + 4.0 if grows else before)


def test_a_refusal_of_a_request_started_before_the_last_cut_cuts_nothing():
    rate = learned_at(100.0, cut_at=10.0)
    accepted(rate, at=10.1, waited=False)  # a round trip: a refusal started after the cut would cut now

    refused(rate, at=9.9)

    assert rate.current == 100.0


@pytest.mark.parametrize(
    "accepted_since_cut, refusals, cuts",
    [
        # a round trip of the new rate: an accepted answer to a request started after the cut
        (True, 1, True),
        # or enough refusals of such requests, before any acceptance came back
        (False, 2, False),
        (False, 3, True),
    ],
)
def test_a_refusal_cuts_once_the_rate_since_the_last_cut_has_shown_itself(accepted_since_cut, refusals, cuts):
    rate = learned_at(100.0, cut_at=10.0)
    if accepted_since_cut:
        accepted(rate, at=10.1)
    rate.rate = 100.0  # whatever that answer added

    for i in range(refusals):
        refused(rate, at=10.2 + i / 100)

    assert (rate.current < 100.0) is cuts


@pytest.mark.parametrize(
    "round_trip, others_started, refusals, expected",
    [
        # after a round trip of the rate, the first refusal among 100 started since the cut: 0.9 x 0.99
        (True, 99, 1, 89.1),
        # no round trip yet: the third refusal cuts, with half of those started refused (twice too
        # fast): halved, and a tenth more
        (False, 3, 3, 45.0),
        # nothing but refusals: halved, and a tenth more
        (False, 0, 3, 45.0),
    ],
)
def test_a_cut_is_a_tenth_of_the_rate_times_the_share_accepted_since_the_last_cut(
    round_trip, others_started, refusals, expected
):
    rate = learned_at(100.0, cut_at=10.0)
    if round_trip:
        accepted(rate, at=10.05)
        rate.rate = 100.0  # whatever that answer added
    for _ in range(others_started - rate.started_since_cut):
        rate.on_start()  # started, not yet answered

    for i in range(refusals):
        refused(rate, at=10.1 + i / 1000)

    assert rate.current == pytest.approx(expected)


def test_rate_cuts_stop_at_the_minimum():
    rate = learned_at(0.02, cut_at=10.0)

    for i in range(rate.evidence):
        refused(rate, at=10.1 + i)

    assert rate.current == pytest.approx(1 / 60)


def test_a_cut_ends_slow_start():
    rate = LearnedRate()
    refused(rate, at=0.0)
    accepted(rate, at=0.1)  # 4/s more, and a round trip since the cut
    assert rate.slow_start

    refused(rate, at=0.2)

    assert not rate.slow_start


@pytest.mark.parametrize(
    "waited, after_last_refusal, grows",
    [(True, True, True), (False, True, False), (True, False, False)],
)
def test_out_of_slow_start_an_answer_the_rate_held_back_since_the_last_refusal_adds_a_two_thousandth(
    waited, after_last_refusal, grows
):
    rate = learned_at(100.0, cut_at=10.0)
    refused(rate, at=10.5)  # no cut: no round trip yet
    assert rate.current == 100.0

    accepted(rate, at=10.6 if after_last_refusal else 10.4, waited=waited)

    assert rate.current == pytest.approx(100.05 if grows else 100.0)


def test_after_a_cut_of_a_tenth_about_two_hundred_held_back_answers_bring_the_rate_back():
    rate = learned_at(90.0, cut_at=10.0)

    for i in range(211):
        accepted(rate, at=10.0 + i / 100)

    assert 99.9 < rate.current < 100.1
