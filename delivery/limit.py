"""How many requests a worker keeps open to one receiver. Pure, so it is tested as a table.

The receiver's latency, not ours, decides how much concurrency is needed: a
receiver answering in 250 ms needs 250 requests open to take 1,000 a second,
one answering at once needs a handful. So the limit is found, as TCP finds its
window (and Netflix's concurrency-limits their AIMD limit):

- slow start: while nothing pushes back, every success adds one, so the limit
  doubles each round trip until the receiver or the backlog says enough;
- then additive increase: each round trip adds about the square root of the
  limit, so after a cut it climbs back within seconds, not minutes;
- multiplicative decrease: a drop (timeout, connection error, 5xx, 429) cuts it
  in half, and latency well above the best seen cuts it by a tenth; a cut
  happens at most once per round trip, so a wall of simultaneous failures (a
  receiver going down with hundreds open) counts as one signal, not hundreds;
- a success grows the limit only if the limit was what held the worker back
  (at least half of it in use), so an idle worker does not inflate it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class AdaptiveLimit:
    initial: int = 16
    minimum: int = 1
    maximum: int = 2000
    # Latency above tolerance x best + slack (seconds) is the receiver queueing.
    latency_tolerance: float = 2.0
    latency_slack: float = 0.05
    limit: float = field(init=False)
    slow_start: bool = field(init=False, default=True)
    best_latency: float | None = field(init=False, default=None)
    # Monotonic time of the last cut: samples from requests started before it
    # describe the load that caused the cut and cut nothing more.
    last_cut: float = field(init=False, default=float("-inf"))

    def __post_init__(self) -> None:
        self.limit = float(min(max(self.initial, self.minimum), self.maximum))

    @property
    def current(self) -> int:
        return int(self.limit)

    def on_sample(self, *, started: float, finished: float, dropped: bool, in_flight: int) -> None:
        """One request's outcome: `in_flight` open (itself included) when it started."""
        latency = finished - started
        if dropped:
            self._cut(factor=0.5, started=started, at=finished)
            return
        if self.best_latency is None or latency < self.best_latency:
            self.best_latency = latency
        else:
            # Let the best drift up slowly, so a receiver that got slower for
            # good stops looking congested after a few thousand samples.
            self.best_latency += (latency - self.best_latency) * 0.001
        if latency > self.best_latency * self.latency_tolerance + self.latency_slack:
            self._cut(factor=0.9, started=started, at=finished)
            return
        if in_flight * 2 < self.limit:
            return  # the limit did not hold this worker back: nothing learnt
        step = 1.0 if self.slow_start else math.sqrt(self.limit) / self.limit
        self.limit = min(self.limit + step, float(self.maximum))

    def _cut(self, *, factor: float, started: float, at: float) -> None:
        self.slow_start = False
        if started < self.last_cut:
            return
        self.last_cut = at
        self.limit = max(self.limit * factor, float(self.minimum))


@dataclass
class FixedLimit:
    """An operator's --concurrency: exactly this many open, whatever the receiver says."""

    limit: int

    @property
    def current(self) -> int:
        return self.limit

    def on_sample(self, *, started: float, finished: float, dropped: bool, in_flight: int) -> None:
        return None
