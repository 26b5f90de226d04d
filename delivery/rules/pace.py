"""The fleet's rate cap as calendar seconds: the slots each second holds, and which of them a worker takes.

Pure, so tested as tables; delivery.states.endpoints applies `rate_slots_take`
to the endpoint's row under its lock, and the lanes send at the slots it gives.

A cap of r requests a second is a promise about the receiver's seconds: it
counts what arrives in each of its calendar seconds, and bans a sender that
goes over. So the fleet hands out each calendar second's slots, counted in the
database, rather than instants spaced 1/r apart: spaced instants say nothing
about a second once a request goes out later than its instant (the thread was
busy with PostgreSQL, the CPU was taken), and the late ones of one worker meet
the punctual ones of another in the next second. Here:

- second N (of the epoch, on the workers' clocks) holds floor(r (N+1)) - floor(r N)
  slots: r for a whole-number r; for 2.5, two and three in turn, so any k
  seconds in a row hold at most ceil(k r), and 0.5 gives every other second one;
- its j-th slot of n is at N + j * SPAN / n: the slots are spread over the
  second's first SPAN, and a request starts at its slot or later but before
  N + SPAN (the slot's deadline). A request that cannot (its worker was held
  up, its lane's learnt rate made it wait) is not sent with that slot: it
  waits for a new one. So no second's starts outnumber its slots, however late
  a worker gets to them, and the GUARD left at the end of each second keeps a
  request started near its end from arriving in the next at a receiver whose
  clock, network or accept queue is up to GUARD behind the worker's;
- slots whose instant passed unused are gone (as a GCRA does with the time it
  was idle): a second that began quiet is not made up by a burst at its end.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The end of each second left without starts: how much more the receiver's clock, the network and
# its accept queue may lag the worker's for one request than for another without it counting in the
# next second (a lag the same for all shifts every second alike, and the count holds). A fifth: with
# a tenth, a Python receiver on a loaded machine counted more starts in one second than its limit
# (bench/results/REPORT-house.md); NTP keeps hosts' clocks within a few milliseconds.
GUARD = 0.2
SPAN = 1.0 - GUARD


@dataclass(frozen=True)
class RateWindow:
    """The fleet's place in the schedule: the second whose slots are being handed out, and how many are gone."""

    second: int
    taken: int = 0


@dataclass(frozen=True)
class RateSlot:
    """One request's place in a second: it starts at `at` or later, and before `deadline` or not at all.

    Both are epoch seconds (time.time()), the clock the receiver counts in.
    """

    at: float
    deadline: float


def slots_in(second: int, rate: float) -> int:
    """How many requests second `second` holds at `rate` a second."""
    return math.floor(rate * (second + 1)) - math.floor(rate * second)


def second_with_slots(second: int, rate: float) -> int:
    """The first second from `second` on that holds a slot (the next one, unless the rate is below one a second)."""
    candidate = max(second, math.ceil((math.floor(rate * second) + 1) / rate) - 1)
    while slots_in(candidate, rate) == 0:  # a float's rounding: a step at most
        candidate += 1
    return candidate


def rate_slots_take(
    *, window: RateWindow, now: float, want: int, rate: float
) -> tuple[RateWindow, list[RateSlot]]:
    """Take up to `want` slots (at least one) from the earliest second with some left: the new window and the slots.

    `now` is the caller's time.time(). The slots are all in one second (the
    current one if it has any left, else the next with slots), consecutive,
    none before `now`.
    """
    current = math.floor(now)
    second, taken = (window.second, window.taken) if window.second >= current else (current, 0)
    while True:
        second = second_with_slots(second, rate) if taken == 0 else second
        held = slots_in(second, rate)
        if second <= now:
            # (less a hair: an epoch float's rounding must not burn a slot that is due right now)
            passed = held if now - second >= SPAN else math.ceil((now - second) * held / SPAN - 1e-3)
            taken = max(taken, passed)
        if taken < held:
            break
        second, taken = second + 1, 0
    count = max(1, min(want, held - taken))
    slots = [RateSlot(at=second + (taken + j) * SPAN / held, deadline=second + SPAN) for j in range(count)]
    return RateWindow(second=second, taken=taken + count), slots
