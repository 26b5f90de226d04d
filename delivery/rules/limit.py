"""How many requests a worker keeps open to one receiver, and how fast it starts them. Pure, so tested as tables.

The receiver's latency, not ours, decides how much concurrency is needed: a
receiver answering in 250 ms needs 250 requests open to take 1,000 a second,
one answering at once needs a handful. So the limit is found, as TCP finds its
window (and Netflix's concurrency-limits their AIMD limit):

- slow start: while nothing pushes back, every success adds one, so the limit
  doubles each round trip until the receiver or the backlog says enough;
- then additive increase: each round trip adds about the square root of the
  limit, so after a cut it climbs back within seconds, not minutes;
- multiplicative decrease: a drop (timeout, connection error, 5xx, a 429 or 503
  with Retry-After) cuts it in half, and latency well above the best seen cuts
  it by a tenth; a cut happens at most once per round trip, so a wall of
  simultaneous failures (a receiver going down with hundreds open) counts as
  one signal, not hundreds;
- a success grows the limit only if the limit was what held the worker back:
  at least half of it in use, so an idle worker does not inflate it, and, at a
  receiver answering within `slow_latency`, deliveries waiting behind it
  (`held_back`). A limit that holds nothing back learns nothing by growing.
  At a fast receiver it grew even so, past the claimed batch, and the worker
  sent each batch in one burst, then waited on PostgreSQL with nothing to send:
  slower than a fixed limit, at more CPU a delivery. A slow receiver needs its
  rate times its latency open (thousands at 1 s), and its slow start doubles
  the limit only if every answer grows it: between two claims of a batch the
  lane runs dry, and with the backlog asked of it too the limit stopped short
  of what a 1 s receiver needs (the figures: bench/results/REPORT-queued.md).

A receiver that enforces a rate (nginx limit_req, an API gateway, a chat
service) answers what goes over it with 429 and no Retry-After, at once. Fewer
requests open does not help there: each refusal frees its place at once, and the
next request goes out as fast, so halving the window on every 429 only shrank
it until the receiver's rate was far from used. It needs a rate, which
`LearnedRate` learns as TCP-friendly rate control does, by AIMD on the rate
itself (see its docstring); the lane paces its starts to it (delivery.worker.lanes),
and such a 429 is not a drop for the window.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass
class AdaptiveLimit:
    initial: int = 16
    minimum: int = 1
    maximum: int = 2000
    # Latency above tolerance x best + slack (seconds) is the receiver queueing.
    latency_tolerance: float = 2.0
    latency_slack: float = 0.05
    # A receiver whose best latency is this long (seconds) grows the limit whether or not deliveries wait.
    slow_latency: float = 0.1
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

    def on_sample(
        self, *, started: float, finished: float, dropped: bool, in_flight: int, held_back: bool = True
    ) -> None:
        """One request's outcome: `in_flight` open (itself included) when it started; `held_back` whether
        deliveries waited behind the limit when it ended."""
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
        # At a fast receiver only deliveries waiting behind the limit show that it held the worker back.
        waited = held_back or self.best_latency >= self.slow_latency
        if in_flight * 2 < self.limit or not waited:
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

    def on_sample(
        self, *, started: float, finished: float, dropped: bool, in_flight: int, held_back: bool = True
    ) -> None:
        return None


@dataclass
class LearnedRate:
    """The rate a receiver takes, learned from its 429s without Retry-After: requests a second to start, or None.

    None until the receiver first refuses (nothing is paced that never was).
    Then AIMD on the rate:

    - the first refusal sets it to `decrease` x the rate the receiver was seen
      to accept: the last `sample` accepted requests started within
      `measure_for` seconds. Fewer than that (a burst refused before any
      answer came back, a receiver quiet until now) say too little, so the
      rate starts from `guess` in slow start instead: each accepted answer
      adds 1 / its latency (the rate doubles every round trip), answers still
      on their way from before the refusal included, until the next cut;
    - a later refusal cuts it to `decrease` x the rate x the share of the
      requests started since the last cut that the receiver accepted (at
      least half: a few refusals in a row say "too fast", not how much): one
      refusal among many cuts a tenth, a pace twice too fast is halved at
      once. At most one cut per round trip of the new pace: a refusal cuts
      only if its request started after the last cut, and once an answer to
      such a request was accepted or `evidence` of them were refused (a
      limiter refuses at once, so its refusals come before any acceptance);
    - increase: each accepted request that waited for its turn at the rate
      (so the rate is what held it back) and started after the last refusal
      adds `increase` of the rate. After a cut of a tenth the rate is back
      where it was after about two hundred requests, whatever the receiver's
      limit, so the requests that go over it stay a small share of all, at
      1/s as at 1,000/s.

    Instants are time.monotonic(); a request's is when it started, after its
    wait for the rate, so it started at the rate of that moment.
    """

    decrease: float = 0.9
    increase: float = 0.0005
    # A receiver that refuses everything is asked once a minute, as a failing endpoint is probed.
    minimum: float = 1 / 60
    # Where slow start begins: one request a second, whatever receiver it is, climbs to a
    # thousand a second in ten round trips.
    guess: float = 1.0
    sample: int = 20
    measure_for: float = 10.0
    evidence: int = 3
    rate: float | None = field(init=False, default=None)
    slow_start: bool = field(init=False, default=False)
    first_cut_mono: float = field(init=False, default=float("inf"))
    last_cut_mono: float = field(init=False, default=float("-inf"))
    last_refusal_mono: float = field(init=False, default=float("-inf"))
    # Since the last cut: requests started, and of those, refused and whether one was accepted.
    started_since_cut: int = field(init=False, default=0)
    refused_since_cut: int = field(init=False, default=0)
    accepted_since_cut: bool = field(init=False, default=False)
    # When the latest accepted requests started.
    accepted_started_mono: deque[float] = field(init=False)

    def __post_init__(self) -> None:
        self.accepted_started_mono = deque(maxlen=self.sample)

    @property
    def current(self) -> float | None:
        return self.rate

    def on_start(self) -> None:
        """A request started (at the current rate, if there is one)."""
        self.started_since_cut += 1

    def on_answer(self, *, started_mono: float, finished_mono: float, refused: bool, waited: bool) -> None:
        """One answer: refused (429 without Retry-After) or accepted; `waited`: it waited for its turn at the rate."""
        if refused:
            self._refused(started_mono=started_mono, at=finished_mono)
        else:
            self._accepted(started_mono=started_mono, latency=finished_mono - started_mono, waited=waited)

    def _refused(self, *, started_mono: float, at: float) -> None:
        self.last_refusal_mono = max(self.last_refusal_mono, at)
        if started_mono < self.last_cut_mono:
            return  # started at the rate before the last cut: that cut answered it
        self.refused_since_cut += 1
        if self.rate is None:
            self._first_cut(at=at)
            return
        if not self.accepted_since_cut and self.refused_since_cut < self.evidence:
            return
        accepted_share = 1 - self.refused_since_cut / max(self.started_since_cut, self.refused_since_cut)
        self._cut_to(self.decrease * self.rate * max(accepted_share, 0.5), at=at)
        self.slow_start = False

    def _first_cut(self, *, at: float) -> None:
        recent = [started for started in self.accepted_started_mono if started >= at - self.measure_for]
        self.slow_start = len(recent) < self.sample
        self.first_cut_mono = at
        if self.slow_start:
            self._cut_to(self.guess, at=at)
        else:
            self._cut_to(self.decrease * (len(recent) - 1) / max(max(recent) - min(recent), 1e-3), at=at)

    def _cut_to(self, rate: float, *, at: float) -> None:
        self.rate = max(rate, self.minimum)
        self.last_cut_mono = at
        self.started_since_cut = self.refused_since_cut = 0
        self.accepted_since_cut = False

    def _accepted(self, *, started_mono: float, latency: float, waited: bool) -> None:
        self.accepted_started_mono.append(started_mono)
        if started_mono >= self.last_cut_mono:
            self.accepted_since_cut = True
        if self.rate is None:
            return
        held_back = waited and started_mono >= self.last_refusal_mono
        if self.slow_start and (started_mono < self.first_cut_mono or held_back):
            self.rate += 1 / max(latency, 1e-3)
        elif held_back:
            self.rate += self.rate * self.increase
