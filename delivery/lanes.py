"""A worker's mirror of the endpoints it sends to: what it holds for each, and what may go out now.

The demand half of the worker, as Oban keeps its producer apart from its
executor: for every endpoint a `Lane` holds the deliveries claimed and not yet
started and counts the requests open, and `Lanes` decides how many more may
start, from

- the lane's own limit: adaptive (delivery.limit) or an operator's --concurrency;
- the fleet's max in flight (the destination's, else WEBHOOK_MAX_IN_FLIGHT), of which
  this worker holds a share;
- the fleet's max rate (the destination's, else WEBHOOK_MAX_RATE) schedule, from
  which it reserves send slots;
- the rate the lane learnt from the receiver's 429s without Retry-After
  (delivery.limit.LearnedRate): each request waits for its turn at it, taken
  when it is about to start, so a cut slows what is already waiting; with a max
  rate too, a request waits for both, and the stricter wins;
- a Retry-After the receiver asked for;
- the endpoint's health: a failing endpoint gets one probe at a time, a paused
  one nothing, and what waits for either goes back to the queue (as does what a lane
  holds far beyond what its learnt rate starts in a second).

The endpoints' shared state is read from their rows once a second, and the
destinations' settings with them (signing secrets, timeout, limits), so an
operator's pause or edit, or another worker's verdict, reaches this one within
about that long. The requests themselves run in delivery.sender; delivery.worker
asks the two in turn.

Two clocks meet here: an instant named `..._mono` is time.monotonic(), for
deadlines inside this process; a datetime comes from a database row.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from django.conf import settings
from django.utils import timezone

from delivery.health import Signal, signal_of
from delivery.limit import AdaptiveLimit, FixedLimit, LearnedRate
from delivery.metrics import IN_FLIGHT_LIMIT, LEARNED_RATE
from delivery.models import Destination, Endpoint, EndpointState
from delivery.receiver_urls import url_decrypt
from delivery.selectors import destination_signing_secrets
from delivery.services.destinations import destinations_seed_default
from delivery.services.endpoints import (
    endpoint_for_destination,
    endpoint_release_shares,
    endpoint_reserve_send_slots,
    endpoint_return_probe,
    endpoint_share_in_flight,
    endpoint_take_probe,
)
from delivery.signing import WebhookSigner
from delivery.transport import ClaimedDelivery, SendResult

HEALTHY, FAILING = EndpointState.HEALTHY, EndpointState.FAILING

# How often the endpoints' shared state is read again (an operator's pause, a
# failing endpoint, a Retry-After another worker was told, the fleet's shares):
# a pause reaches every worker within about this long.
REFRESH_EVERY = 1.0
# Under WEBHOOK_MAX_RATE a worker reserves this many seconds of the schedule at a time:
# short, so slots it cannot use (it stops, the backlog ends) cost the fleet little. Under
# a learned rate about as many requests wait for their turn at once.
RATE_HORIZON = 0.25
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

    state: str
    consecutive_failures: int
    next_probe_at: datetime | None


@dataclass
class Lane:
    """This worker's traffic to one endpoint: what it holds, what is open, what may be."""

    # The endpoint's identity (Endpoint.key): what deliveries name it by.
    key: str
    endpoint_id: int
    # Where requests go, decrypted from the endpoint's row (a credential: never logged or labelled).
    url: str
    # Named in log lines and metric labels instead of the URL: its destination's name, or what
    # the endpoint shows (Endpoint.url_display) while no destination has it.
    name: str
    limit: AdaptiveLimit | FixedLimit
    state: str = HEALTHY
    consecutive_failures: int = 0
    next_probe_at: datetime | None = None
    # No request starts before this instant (a Retry-After).
    blocked_until_mono: float = 0.0
    # Claimed, not yet started.
    waiting: deque[ClaimedDelivery] = field(default_factory=deque)
    open: int = 0
    probing: bool = False
    # Our part of max_in_flight (None: no fleet cap).
    share: int | None = None
    # Instants reserved under max_rate, earliest first.
    slots_mono: deque[float] = field(default_factory=deque)
    # The destination's settings (follow_destination); without one, the settings' defaults, unsigned.
    max_rate: float = 0.0
    max_in_flight: int = 0
    timeout: float | None = None
    signer: WebhookSigner | None = None
    signing_secrets: tuple[str, ...] = ()
    # The receiver's rate limit as learnt from its 429s without Retry-After, and the instant
    # of the last turn taken at it.
    rate: LearnedRate = field(default_factory=LearnedRate)
    last_turn_mono: float = float("-inf")
    # Of the open: handed to the sender and not begun (waiting for a rate slot or a turn).
    not_begun: int = 0

    def allowed(self) -> int:
        """How many requests may be open now."""
        return self.limit.current if self.share is None else min(self.limit.current, self.share)

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

    def take_turn(self, now_mono: float) -> None:
        """A request starts now, its turn come (see turn_in)."""
        rate = self.rate.current
        if rate is None:
            self.last_turn_mono = now_mono
        else:
            self.last_turn_mono = max(self.last_turn_mono + 1 / rate, now_mono - PACE_CATCH_UP)
        self.rate.on_start()

    def takes_claims(self, now_mono: float) -> bool:
        return self.state == HEALTHY and now_mono >= self.blocked_until_mono

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

    def follow_health(self, health: HealthColumns) -> None:
        self.state = health.state
        self.consecutive_failures = health.consecutive_failures
        self.next_probe_at = health.next_probe_at

    def follow_destination(
        self, destination: Destination, *, secrets: list[str], max_rate: float, max_in_flight: int
    ) -> None:
        """The destination's settings as now saved; `max_rate` and `max_in_flight` are the settings' defaults."""
        self.name = destination.name
        self.max_rate = destination.max_rate if destination.max_rate is not None else max_rate
        self.max_in_flight = (
            destination.max_in_flight if destination.max_in_flight is not None else max_in_flight
        )
        self.timeout = destination.timeout.total_seconds() if destination.timeout is not None else None
        if tuple(secrets) != self.signing_secrets:
            self.signing_secrets = tuple(secrets)
            self.signer = WebhookSigner(secrets) if secrets else None

    def learn_from(
        self, result: SendResult, *, open_at_start: int, finished_mono: float, waited_for_turn: bool
    ) -> None:
        """One answer's lessons for this lane: the rate's sample, the limit's, and a Retry-After to obey at once."""
        if result.refused:
            return  # no request was made (a refused address): nothing to learn about the receiver
        signal = signal_of(
            outcome=result.outcome, status_code=result.status_code, retry_after=result.retry_after
        )
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
        )
        if signal == Signal.THROTTLE and result.retry_after is not None:
            # Every worker learns it from the endpoint's row once this is recorded; this one stops now.
            wait = min(result.retry_after, settings.DELIVERY_RETRY_MAX.total_seconds())
            self.blocked_until_mono = max(self.blocked_until_mono, finished_mono + wait)


class Lanes:
    """Every lane of this worker, and the decisions that need all of them."""

    def __init__(
        self,
        *,
        worker: str,
        concurrency: int | None,
        batch_size: int,
        max_rate: float,
        max_in_flight: int,
        lease: timedelta,
    ) -> None:
        self.worker = worker
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.max_rate = max_rate
        self.max_in_flight = max_in_flight
        self.lease = lease
        self.by_key: dict[str, Lane] = {}
        # Each lane's URL as last decrypted: decrypted again only when its ciphertext changes.
        self._url_ciphertexts: dict[str, str] = {}
        self.refreshed_mono = float("-inf")
        # Set when a verdict made an endpoint failing: read the rows on the next turn, not a second later.
        self.stale = True
        # WEBHOOK_URL's destination is seeded, if none exists, on the first refresh (destinations_seed_default).
        self.seeded = False

    # --- the endpoints' shared state --------------------------------------------

    def lane(self, endpoint: Endpoint) -> Lane:
        lane = self.by_key.get(endpoint.key)
        if lane is None:
            limit = FixedLimit(self.concurrency) if self.concurrency else AdaptiveLimit()
            lane = self.by_key[endpoint.key] = Lane(
                key=endpoint.key,
                endpoint_id=endpoint.pk,
                url=url_decrypt(endpoint.url_ciphertext),
                name=endpoint.url_display,
                limit=limit,
                max_rate=self.max_rate,
                max_in_flight=self.max_in_flight,
            )
            self._url_ciphertexts[endpoint.key] = endpoint.url_ciphertext
            self._follow_row(lane, endpoint)
        return lane

    def _follow_row(self, lane: Lane, endpoint: Endpoint) -> None:
        if self._url_ciphertexts.get(endpoint.key) != endpoint.url_ciphertext:
            # Re-encrypted under a new key (destination_secrets_reencrypt): the same URL.
            lane.url = url_decrypt(endpoint.url_ciphertext)
            self._url_ciphertexts[endpoint.key] = endpoint.url_ciphertext
        lane.follow_health(endpoint)
        if endpoint.blocked_until is not None:
            remaining = (endpoint.blocked_until - timezone.now()).total_seconds()
            lane.blocked_until_mono = max(lane.blocked_until_mono, time.monotonic() + remaining)

    def refresh_if_due(self) -> list[ClaimedDelivery]:
        """Read every endpoint's row once a second; return what this worker holds for endpoints that take nothing now,
        and what a lane holds far beyond its learnt rate (Lane.take_excess).

        Those go back to the queue (the caller hands them back), where they
        wait with the rest in their due order.
        """
        now_mono = time.monotonic()
        if not self.stale and now_mono - self.refreshed_mono < REFRESH_EVERY:
            return []
        endpoints = {endpoint.key: endpoint for endpoint in Endpoint.objects.all()}
        self._follow_destinations(endpoints)
        for endpoint in endpoints.values():
            self._follow_row(self.lane(endpoint), endpoint)
        self._renew_shares()
        self.refreshed_mono = now_mono
        self.stale = False
        for lane in self.by_key.values():
            IN_FLIGHT_LIMIT.labels(endpoint=lane.name).set(lane.allowed() if lane.state == HEALTHY else 0)
            LEARNED_RATE.labels(endpoint=lane.name).set(lane.rate.current or 0)
        stopped = self._take_waiting(lanes=[lane for lane in self.by_key.values() if lane.state != HEALTHY])
        return stopped + [delivery for lane in self.by_key.values() for delivery in lane.take_excess()]

    def _follow_destinations(self, endpoints: dict[str, Endpoint]) -> None:
        """Every destination has a lane with its secrets, timeout and limits, as saved now.

        A lane whose URL no destination has any more (its URL was edited)
        keeps what it had: what it still holds was queued for that destination.
        `endpoints` are the endpoint rows by key; a destination's missing there is made.
        """
        if not self.seeded:
            destinations_seed_default()
            self.seeded = True
        destinations = list(Destination.objects.all())
        secrets = destination_signing_secrets(destinations=destinations, now=timezone.now())
        for destination in destinations:
            endpoint = endpoints.get(destination.url_key)
            if endpoint is None:
                endpoint = endpoints[destination.url_key] = endpoint_for_destination(destination=destination)
            self.lane(endpoint).follow_destination(
                destination,
                secrets=secrets[destination.pk],
                max_rate=self.max_rate,
                max_in_flight=self.max_in_flight,
            )

    def _renew_shares(self) -> None:
        for lane in self.by_key.values():
            if not lane.max_in_flight:
                lane.share = None
                continue
            want = lane.limit.current if (lane.waiting or lane.open or lane.state == HEALTHY) else 0
            lane.share = endpoint_share_in_flight(
                endpoint_id=lane.endpoint_id,
                worker=self.worker,
                want=want,
                holding=lane.open,
                cap=lane.max_in_flight,
                lease=self.lease,
                now=timezone.now(),
            )

    def follow_verdicts(self, verdicts: Mapping[str, HealthColumns]) -> None:
        """The health the last record gave some endpoints; one no longer healthy hands back what waits, next turn."""
        for key, health in verdicts.items():
            lane = self.by_key[key]
            lane.follow_health(health)
            if lane.state != HEALTHY:
                self.stale = True

    def healthy_keys(self) -> list[str]:
        """The endpoints last seen HEALTHY with no failure counted (deliveries_record's quiet path)."""
        return [
            key
            for key, lane in self.by_key.items()
            if lane.state == HEALTHY and lane.consecutive_failures == 0
        ]

    def release_shares(self) -> None:
        """A stopping worker gives its in-flight shares back at once (they also expire by themselves)."""
        if any(lane.max_in_flight for lane in self.by_key.values()):
            endpoint_release_shares(worker=self.worker)

    # --- what to claim --------------------------------------------------------------

    def accepting(self, now_mono: float) -> list[Lane]:
        return [lane for lane in self.by_key.values() if lane.takes_claims(now_mono)]

    def closed_keys(self, now_mono: float) -> list[str]:
        return [key for key, lane in self.by_key.items() if not lane.takes_claims(now_mono)]

    def room(self, now_mono: float) -> int:
        """How many more deliveries the lanes that take claims would hold."""
        return sum(lane.room(batch_size=self.batch_size) for lane in self.accepting(now_mono))

    def worth_claiming(self, now_mono: float, *, batch: int) -> bool:
        """Whether their room is worth a claim's statement: `batch` in all, or half of what a paced lane holds."""
        lanes = self.accepting(now_mono)
        if sum(lane.room(batch_size=self.batch_size) for lane in lanes) >= batch:
            return True
        return any(
            (held_at_most := lane.held_at_most()) is not None
            and 2 * lane.room(batch_size=self.batch_size) >= held_at_most
            for lane in lanes
        )

    def hold(self, deliveries: list[ClaimedDelivery]) -> list[ClaimedDelivery]:
        """Put claimed deliveries in their lanes; return those whose endpoint is gone, for the caller to hand back.

        An endpoint goes when its destination's URL changes (or the destination is
        deleted); the change moved the unsent deliveries to the new endpoint,
        these among them if claimed just before it, so handed back they wait
        there.
        """
        unknown = {d.endpoint_key for d in deliveries if d.endpoint_key not in self.by_key}
        for endpoint in Endpoint.objects.filter(key__in=unknown) if unknown else ():
            self.lane(endpoint)
        stray = []
        for delivery in deliveries:
            lane = self.by_key.get(delivery.endpoint_key)
            if lane is None:
                stray.append(delivery)
            else:
                lane.waiting.append(delivery)
        return stray

    def probes_due(self) -> Iterator[Lane]:
        now = timezone.now()
        for lane in list(self.by_key.values()):
            if (
                lane.state == FAILING
                and not lane.probing
                and lane.next_probe_at is not None
                and lane.next_probe_at <= now
            ):
                yield lane

    def take_probe(self, lane: Lane) -> bool:
        """Win the failing endpoint's next probe from the fleet (one worker at a time)."""
        return endpoint_take_probe(endpoint_id=lane.endpoint_id, now=timezone.now(), lease=self.lease)

    def return_probe(self, lane: Lane) -> None:
        """The probe won found nothing to send: the next one may start after the current interval."""
        endpoint_return_probe(endpoint_id=lane.endpoint_id, now=timezone.now())

    # --- what may start -----------------------------------------------------------

    def holding(self) -> bool:
        """Whether any delivery is claimed and not yet finished."""
        return any(lane.waiting or lane.open for lane in self.by_key.values())

    def waiting(self) -> bool:
        return any(lane.waiting for lane in self.by_key.values())

    def until_sendable(self) -> float:
        """Seconds until a lane holding deliveries may start one (0 if one may now)."""
        now_mono = time.monotonic()
        return min(
            (lane.blocked_until_mono - now_mono for lane in self.by_key.values() if lane.waiting), default=0.0
        )

    def ready_to_start(self, *, may_reserve: bool) -> Iterator[tuple[Lane, ClaimedDelivery, float | None]]:
        """The waiting deliveries each lane allows to start now, with the rate slot each must wait for.

        Lazily, one at a time: the caller starts each before asking for the
        next, which counts it open. Without `may_reserve` no slots are reserved
        (no database work: the event loop is running) and a lane under
        max rate starts only what slots it already has. Under a learned
        rate each then waits for its turn too (Lane.turn_in).
        """
        now_mono = time.monotonic()
        for lane in self.by_key.values():
            while (
                lane.waiting
                and lane.open < lane.allowed()
                and lane.takes_claims(now_mono)
                and lane.may_hand_over()
            ):
                slot_mono = None
                if lane.max_rate:
                    if not lane.slots_mono:
                        if not may_reserve:
                            break
                        self._reserve_slots(lane)
                    slot_mono = lane.slots_mono.popleft()
                yield lane, lane.waiting.popleft(), slot_mono

    def _reserve_slots(self, lane: Lane) -> None:
        # A learned rate below the fleet's takes fewer of the fleet's slots at a time.
        rate = min(lane.max_rate, lane.rate.current or lane.max_rate)
        count = max(1, min(len(lane.waiting), lane.allowed() - lane.open, math.ceil(rate * RATE_HORIZON)))
        now = timezone.now()
        first = endpoint_reserve_send_slots(endpoint_id=lane.endpoint_id, count=count, rate=rate, now=now)
        start_mono = time.monotonic() + (first - now).total_seconds()
        lane.slots_mono.extend(start_mono + i / rate for i in range(count))

    # --- stopping ---------------------------------------------------------------------

    def take_all_waiting(self) -> list[ClaimedDelivery]:
        return self._take_waiting(lanes=list(self.by_key.values()))

    def _take_waiting(self, *, lanes: list[Lane]) -> list[ClaimedDelivery]:
        taken = [delivery for lane in lanes for delivery in lane.waiting]
        for lane in lanes:
            lane.waiting.clear()
        return taken
