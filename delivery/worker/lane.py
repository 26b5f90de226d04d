"""One endpoint's lane in a worker: what it holds, what is open, and how fast it may start more.

The lane is the only writer of its counters. The lanes hand it what was
claimed (`hold`) and take what may start (`take_next`); the sender tells it
what happened to each request (`started`, `begun`, `finished`, `missed`); the
lanes' refresh tells it what the fleet says (`follow_health`,
`follow_settings`, `grant_share`, `add_slots`), and each answer what the
receiver taught (`learn_from`). Everything else only reads.

Two clocks meet here: an instant named `..._mono` is time.monotonic(), for
deadlines inside this process; a rate slot's instants are time.time(), the
clock the receiver counts its seconds in (delivery.rules.pace); a datetime comes
from a database row.
"""

from __future__ import annotations

import math
from collections import deque
from datetime import datetime
from typing import Protocol

from delivery.models import EndpointState
from delivery.receivers.lane_settings import LaneSettings, lane_settings
from delivery.receivers.protocol import ClaimedDelivery, SendResult
from delivery.rules.answers import Signal
from delivery.rules.limit import AdaptiveLimit, FixedLimit, LearnedRate
from delivery.rules.pace import RateSlot
from delivery.rules.retry import RetryPolicy

HEALTHY = EndpointState.HEALTHY

# Under a max rate a worker takes this many seconds of the fleet's slots at a time: few,
# so slots it cannot use (it stops, the backlog ends) cost the fleet little. Under a
# learned rate about as many requests wait for their turn at once.
RATE_HORIZON = 0.25
# Under a max rate a lane hands the sender up to this many seconds of requests beyond its limit,
# each waiting for its slot: the requests of the slots it holds are ready when the thread is away
# (claiming, recording), and the limit counts only those that began (Lane.may_begin).
SLOTS_AHEAD = 0.5
# A turn at the learned rate that passed while the thread was away from the event loop
# (claiming, recording) may still be taken this long after: the turns missed in a short
# absence go at once, as the burst a rate limiter allows (nginx's burst, a token
# bucket's depth), so the rate learnt is the receiver's and not one grown past it to
# make up for them; a long absence's are lost rather than sent in one burst.
PACE_CATCH_UP = 0.1
# A lane under a learned rate holds no more waiting than that rate starts in this long:
# the workers sending to one receiver each learn their own share of its limit, and
# deliveries one of them holds cannot go out sooner through another with room.
PACED_HOLD_FOR = 1.0
# What a lane holds beyond this many times that (its learnt rate fell) goes back to the
# queue at the next refresh, down to what it may hold: a margin, so that a rate moving
# by a few per cent does not hand back and claim again every second.
PACED_EXCESS = 2


class HealthColumns(Protocol):
    """What a lane follows of an endpoint's health: its row (Endpoint) or a verdict just recorded (Health)."""

    # Read-only: a verdict (Health) is frozen.
    @property
    def state(self) -> str: ...
    @property
    def consecutive_failures(self) -> int: ...
    @property
    def next_probe_at(self) -> datetime | None: ...


class Lane:
    """This worker's traffic to one endpoint: what it holds, what is open, what may be."""

    def __init__(
        self,
        *,
        key: str,
        endpoint_id: int,
        url: str,
        name: str,
        limit: AdaptiveLimit | FixedLimit,
        settings: LaneSettings | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        # The endpoint's identity (Endpoint.key): what deliveries name it by.
        self.key = key
        self.endpoint_id = endpoint_id
        # Where requests go, decrypted from the endpoint's row (a credential: never logged or labelled).
        self.url = url
        # Named in log lines and metric labels instead of the URL: its destination's name, or what
        # the endpoint shows (Endpoint.url_display) while no destination has it.
        self.name = name
        self.limit = limit
        self.settings = settings or lane_settings()
        # How long a Retry-After stops this lane (RetryPolicy.retry_after_wait): read once, not per answer.
        self.retry = retry or RetryPolicy.from_settings()
        self.state: str = HEALTHY
        self.consecutive_failures = 0
        self.next_probe_at: datetime | None = None
        # No request starts before this instant (a Retry-After).
        self.blocked_until_mono = 0.0
        # Claimed, not yet handed to the sender.
        self.waiting: deque[ClaimedDelivery] = deque()
        # Handed to the sender and not finished; of those, not yet begun (waiting for a slot or a turn).
        self.open = 0
        self.not_begun = 0
        self.probing = False
        # Our part of max_in_flight (None: no fleet cap), and until when it may start requests: a
        # request started later could outlive the permit row that counts it for the fleet.
        self.share: int | None = None
        self.share_usable_until_mono = float("inf")
        # Rate slots taken from the fleet's seconds (delivery.rules.pace), earliest first.
        self.slots: deque[RateSlot] = deque()
        # The receiver's rate limit as learnt from its 429s without Retry-After, and the instant
        # of the last turn taken at it.
        self.rate = LearnedRate()
        self.last_turn_mono = float("-inf")

    # --- what the sender tells it ------------------------------------------------------------

    def started(self, delivery: ClaimedDelivery) -> int:
        """`delivery` went to the sender: it counts as open at once. Returns the requests open, itself included."""
        self.open += 1
        self.not_begun += 1
        if delivery.probe:
            self.probing = True
        return self.open

    def begun(self, now_mono: float) -> None:
        """A request's waits are over and it goes to the receiver now: it takes its turn at the learned rate."""
        self.not_begun -= 1
        rate = self.rate.current
        if rate is None:
            self.last_turn_mono = now_mono
        else:
            self.last_turn_mono = max(self.last_turn_mono + 1 / rate, now_mono - PACE_CATCH_UP)
        self.rate.on_start()

    def finished(self, delivery: ClaimedDelivery, *, begun: bool) -> None:
        """A request ended: answered (`begun`), or cancelled before it began. A probe's end lets the next one start."""
        self.open -= 1
        if not begun:
            self.not_begun -= 1
        if delivery.probe:
            self.probing = False

    def missed(self, delivery: ClaimedDelivery) -> None:
        """A request could not begin (its rate slot's second passed, or the lane's limit or share shrank since it
        was handed over): it was not sent, and waits first in line."""
        self.finished(delivery, begun=False)
        self.waiting.appendleft(delivery)

    # --- what it allows ------------------------------------------------------------------------

    def allowed(self) -> int:
        """How many requests may be open at the receiver now."""
        return self.limit.current if self.share is None else min(self.limit.current, self.share)

    def ahead(self) -> int:
        """How many requests waiting for their rate slot may be handed over beyond the limit (SLOTS_AHEAD)."""
        return math.ceil(self.settings.max_rate * SLOTS_AHEAD) if self.settings.max_rate else 0

    def may_start(self, now_mono: float) -> bool:
        """Whether one more waiting delivery may go to the sender now (a rate slot aside)."""
        return bool(
            self.waiting
            and self.open < self.allowed() + self.ahead()
            and now_mono < self.share_usable_until_mono
            and self.takes_claims(now_mono)
            and self.may_hand_over()
        )

    @property
    def in_flight(self) -> int:
        """Requests at the receiver: begun and not finished."""
        return self.open - self.not_begun

    def may_begin(self, now_mono: float) -> bool:
        """Whether a request handed over may go to the receiver now: those begun are under the limit (and share),
        and the share is still usable.

        Asked of every request, not only paced ones: the share may shrink (the
        next refresh gives a newcomer its part) between the hand-over and the
        request's first step on the event loop, and the permit row counts only
        the requests begun (`in_flight`), so one begun past the new share would
        put the fleet over its cap.
        """
        return self.in_flight < self.allowed() and now_mono < self.share_usable_until_mono

    def short_of_slots(self, now_mono: float) -> bool:
        """Whether, under a max rate, fewer than half of SLOTS_AHEAD's requests wait for a slot and none is left."""
        return bool(
            self.settings.max_rate
            and not self.slots
            and 2 * self.not_begun < self.ahead()
            and self.may_start(now_mono)
        )

    def may_hand_over(self) -> bool:
        """Whether another request may go to the sender: under a learned rate, RATE_HORIZON's worth waits at most."""
        rate = self.rate.current
        return rate is None or self.not_begun < max(1, math.ceil(rate * RATE_HORIZON))

    def turn_in(self, now_mono: float) -> float:
        """Seconds until the learned rate gives the next request its turn (0: now, or no rate learnt)."""
        rate = self.rate.current
        if rate is None:
            return 0.0
        return max(0.0, self.last_turn_mono + 1 / rate - now_mono)

    def takes_claims(self, now_mono: float) -> bool:
        return self.state == HEALTHY and now_mono >= self.blocked_until_mono

    def slots_wanted(self) -> int:
        """How many rate slots to take from the fleet at once: what it could start, at most RATE_HORIZON's worth."""
        # A learned rate below the fleet's takes fewer of the fleet's slots at a time.
        rate = min(self.settings.max_rate, self.rate.current or self.settings.max_rate)
        room = self.allowed() + self.ahead() - self.open
        return max(1, min(len(self.waiting), room, math.ceil(rate * RATE_HORIZON)))

    def next_slot(self, now: float) -> RateSlot | None:
        """The earliest rate slot still usable at `now` (time.time()), taken; None if none is left."""
        while self.slots and self.slots[0].deadline <= now:
            self.slots.popleft()  # its second is over: the fleet counted it, nobody sends with it
        return self.slots.popleft() if self.slots else None

    def room(self, *, batch_size: int) -> int:
        """How many more deliveries to hold: enough to fill the limit, plus one batch ready behind it,
        or under a learned rate what it starts in PACED_HOLD_FOR."""
        room = self.allowed() + batch_size - self.open - len(self.waiting)
        held_at_most = self.held_at_most()
        if held_at_most is not None:
            room = min(room, held_at_most - len(self.waiting))
        return max(0, room)

    def held_at_most(self) -> int | None:
        """Under a learned rate, how many deliveries may wait in this lane (None: no rate learnt)."""
        rate = self.rate.current
        return None if rate is None else max(1, math.ceil(rate * PACED_HOLD_FOR))

    def take_excess(self) -> list[ClaimedDelivery]:
        """Under a learned rate, what waits here beyond PACED_EXCESS times what the lane may hold: taken out.

        The lane claimed them before its share of the receiver's limit was
        learnt (or while it was larger); held here, they would go out at this
        worker's share while another worker with room sits idle. Handed back,
        they wait in the queue in their due order, for whichever worker has a
        turn first. The last claimed go back; the first keep their turns.
        """
        held_at_most = self.held_at_most()
        if held_at_most is None or len(self.waiting) <= PACED_EXCESS * held_at_most:
            return []
        return [self.waiting.pop() for _ in range(len(self.waiting) - held_at_most)]

    def hold(self, delivery: ClaimedDelivery) -> None:
        """A delivery claimed for this lane waits, behind those claimed before it."""
        self.waiting.append(delivery)

    def take_next(self) -> ClaimedDelivery:
        """The first waiting delivery, taken out to go to the sender."""
        return self.waiting.popleft()

    def take_waiting(self) -> list[ClaimedDelivery]:
        taken = list(self.waiting)
        self.waiting.clear()
        return taken

    # --- what the fleet says ---------------------------------------------------------------------

    def follow_health(self, health: HealthColumns) -> None:
        self.state = health.state
        self.consecutive_failures = health.consecutive_failures
        self.next_probe_at = health.next_probe_at

    def follow_settings(self, new: LaneSettings) -> None:
        """The destination's settings as now saved, replacing the old whole (an equal value keeps its signer)."""
        if new != self.settings:
            self.settings = new

    def add_slots(self, slots: list[RateSlot]) -> None:
        self.slots.extend(slots)

    def grant_share(self, share: int | None, *, usable_until_mono: float = float("inf")) -> None:
        self.share = share
        self.share_usable_until_mono = usable_until_mono

    def block_until(self, until_mono: float) -> None:
        self.blocked_until_mono = max(self.blocked_until_mono, until_mono)

    # --- what the receiver teaches --------------------------------------------------------------

    def learn_from(
        self, result: SendResult, *, open_at_start: int, finished_mono: float, waited_for_turn: bool
    ) -> None:
        """One answer's lessons for this lane: the rate's sample, the limit's, and a Retry-After to obey at once."""
        if result.refused:
            return  # no request was made (a refused address): nothing to learn about the receiver
        signal = result.signal
        if signal in (Signal.SUCCESS, Signal.PACE):
            self.rate.on_answer(
                started_mono=result.started_mono,
                finished_mono=finished_mono,
                refused=signal == Signal.PACE,
                waited=waited_for_turn,
            )
        if signal == Signal.PACE:
            return  # the rate answers it: fewer requests open would send as many a second
        self.limit.on_sample(
            started=result.started_mono,
            finished=finished_mono,
            dropped=signal in (Signal.FAILURE, Signal.THROTTLE),
            in_flight=open_at_start,
            # Before the place it frees is filled (the sender starts the next after this).
            held_back=bool(self.waiting),
        )
        if signal == Signal.THROTTLE and result.retry_after is not None:
            # Every worker learns it from the endpoint's row once this is recorded; this one stops now.
            self.block_until(finished_mono + self.retry.retry_after_wait(result.retry_after))
