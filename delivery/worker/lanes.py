"""A worker's mirror of the endpoints it sends to: a lane for each (delivery.worker.lane), and what may go out now.

The demand half of the worker, as Oban keeps its producer apart from its
executor: `Lanes` decides how many more requests may start to each endpoint, from

- the lane's own limit: adaptive (delivery.rules.limit) or an operator's --concurrency;
- the fleet's max in flight (the destination's, else WEBHOOK_MAX_IN_FLIGHT), of which
  this worker holds a share, counted in the endpoint's permit rows;
- the fleet's max rate (the destination's, else its chat service's pace (channels)
  or WEBHOOK_MAX_RATE, the lower): each request
  waits for a slot of a calendar second taken from the endpoint's row (delivery.rules.pace),
  and is not sent if it cannot start within that second;
- the rate the lane learnt from the receiver's 429s without Retry-After
  (delivery.rules.limit.LearnedRate): each request waits for its turn at it, taken
  when it is about to start, so a cut slows what is already waiting; with a max
  rate too, a request waits for both, and the stricter wins;
- a Retry-After the receiver asked for;
- the endpoint's health: a failing endpoint gets one probe at a time, a paused
  one nothing, and what waits for either goes back to the queue (as does what a lane
  holds far beyond what its learnt rate starts in a second).

The endpoints' shared state is read from their rows once a second, and the
destinations' settings with them (delivery.receivers.lane_settings), so an operator's
pause or edit, or another worker's verdict, reaches this one within about that
long. The requests run in delivery.worker.sender; delivery.worker.loop asks the two in turn.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import timedelta

from django.utils import timezone

from delivery.actions.relays import relay_for_sending
from delivery.credentials.receiver_urls import DecryptedUrls
from delivery.destinations.selectors import destination_signing_secrets
from delivery.destinations.services import destinations_seed_default
from delivery.metrics import IN_FLIGHT_LIMIT, LEARNED_RATE
from delivery.models import Destination, Endpoint, EndpointState
from delivery.receivers.lane_settings import lane_settings
from delivery.receivers.protocol import ClaimedDelivery
from delivery.rules.limit import AdaptiveLimit, FixedLimit
from delivery.rules.pace import RateSlot
from delivery.rules.retry import RetryPolicy
from delivery.states.endpoints import (
    endpoint_for_destination,
    endpoint_release_shares,
    endpoint_share_in_flight,
    endpoint_take_rate_slots,
)
from delivery.worker.lane import HealthColumns, Lane

HEALTHY, FAILING = EndpointState.HEALTHY, EndpointState.FAILING

# How often the endpoints' shared state is read again (an operator's pause, a
# failing endpoint, a Retry-After another worker was told, the fleet's shares):
# a pause reaches every worker within about this long.
REFRESH_EVERY = 1.0


class Lanes:
    """Every lane of this worker, and the decisions that need all of them."""

    def __init__(self, *, worker: str, concurrency: int | None, batch_size: int, lease: timedelta) -> None:
        self.worker = worker
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.lease = lease
        self.by_key: dict[str, Lane] = {}
        self.urls = DecryptedUrls()
        # The lanes under a max rate, as of the last refresh: asked after every finished request (short_of_slots).
        self.rated: list[Lane] = []
        self.refreshed_mono = float("-inf")
        # Set when a verdict made an endpoint failing: read the rows on the next turn, not a second later.
        self.stale = True
        # WEBHOOK_URL's destination is seeded, if none exists, on the first refresh (destinations_seed_default).
        self.seeded = False
        # Every lane obeys a Retry-After by this one policy, read from the settings once.
        self.retry = RetryPolicy.from_settings()

    # --- the endpoints' shared state --------------------------------------------

    def lane(self, endpoint: Endpoint) -> Lane:
        lane = self.by_key.get(endpoint.key)
        if lane is None:
            lane = self.by_key[endpoint.key] = Lane(
                key=endpoint.key,
                endpoint_id=endpoint.pk,
                url=self.urls.of(key=endpoint.key, ciphertext=endpoint.url_ciphertext),
                name=endpoint.url_display,
                limit=FixedLimit(self.concurrency) if self.concurrency else AdaptiveLimit(),
                retry=self.retry,
            )
            self._follow_row(lane, endpoint)
        return lane

    def _follow_row(self, lane: Lane, endpoint: Endpoint) -> None:
        lane.url = self.urls.of(key=endpoint.key, ciphertext=endpoint.url_ciphertext)
        lane.follow_health(endpoint)
        if endpoint.blocked_until is not None:
            remaining = (endpoint.blocked_until - timezone.now()).total_seconds()
            lane.block_until(time.monotonic() + remaining)

    def refresh_if_due(self) -> list[ClaimedDelivery]:
        """Read every endpoint's row once a second; return what this worker holds for endpoints that take nothing now,
        and what a lane holds far beyond its learnt rate (Lane.take_excess).

        Those go back to the queue (the caller hands them back), where they
        wait with the rest in their due order. A share of max in flight about
        to stop being usable (see _renew_shares) makes the refresh due sooner.
        """
        now_mono = time.monotonic()
        share_ends_mono = min(
            (lane.share_usable_until_mono for lane in self.by_key.values()), default=now_mono
        )
        if (
            not self.stale
            and now_mono - self.refreshed_mono < REFRESH_EVERY
            and share_ends_mono - now_mono > REFRESH_EVERY / 2
        ):
            return []
        endpoints = {endpoint.key: endpoint for endpoint in Endpoint.objects.all()}
        self._follow_destinations(endpoints)
        for endpoint in endpoints.values():
            self._follow_row(self.lane(endpoint), endpoint)
        self._renew_shares()
        self.rated = [lane for lane in self.by_key.values() if lane.settings.max_rate]
        self.refreshed_mono = now_mono
        self.stale = False
        for lane in self.by_key.values():
            IN_FLIGHT_LIMIT.labels(endpoint=lane.name).set(lane.allowed() if lane.state == HEALTHY else 0)
            LEARNED_RATE.labels(endpoint=lane.name).set(lane.rate.current or 0)
        stopped = [d for lane in self.by_key.values() if lane.state != HEALTHY for d in lane.take_waiting()]
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
            lane = self.lane(endpoint)
            lane.name = destination.name
            lane.follow_settings(
                lane_settings(
                    format=destination.format,
                    max_rate=destination.max_rate,
                    max_in_flight=destination.max_in_flight,
                    timeout=destination.timeout,
                    secrets=secrets[destination.pk],
                    relay=relay_for_sending(destination=destination),
                )
            )

    def _renew_shares(self) -> None:
        """Each lane's share of its fleet's max in flight, renewed for a lease.

        A request started under the share must end before the permit row that
        counts it expires, or another worker could take its place while it is
        still open: so the share starts requests until a timeout before the
        row's end, and the next refresh renews it before then.
        """
        for lane in self.by_key.values():
            if not lane.settings.max_in_flight:
                lane.grant_share(None)
                continue
            renewed_mono = time.monotonic()
            want = lane.limit.current if (lane.waiting or lane.open or lane.state == HEALTHY) else 0
            share = endpoint_share_in_flight(
                endpoint_id=lane.endpoint_id,
                worker=self.worker,
                want=want,
                holding=lane.in_flight,
                cap=lane.settings.max_in_flight,
                lease=self.lease,
                now=timezone.now(),
            )
            usable_for = self.lease.total_seconds() - lane.settings.timeout
            lane.grant_share(share, usable_until_mono=renewed_mono + usable_for)

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
        if any(lane.settings.max_in_flight for lane in self.by_key.values()):
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
        """Put claimed deliveries in their lanes; return those whose endpoint went (its destination's URL changed,
        moving what was unsent to the new one, these too if claimed just before), for the caller to hand back."""
        new_keys = {delivery.endpoint_key for delivery in deliveries} - self.by_key.keys()
        # Nearly every batch's endpoints have their lanes already: no query to build then.
        if new_keys:
            for endpoint in Endpoint.objects.filter(key__in=new_keys):
                self.lane(endpoint)
        for delivery in deliveries:
            if (lane := self.by_key.get(delivery.endpoint_key)) is not None:
                lane.hold(delivery)
        return [delivery for delivery in deliveries if delivery.endpoint_key not in self.by_key]

    # --- what may start -----------------------------------------------------------

    def holding(self) -> bool:
        """Whether any delivery is claimed and not yet finished."""
        return any(lane.waiting or lane.open for lane in self.by_key.values())

    def waiting(self) -> bool:
        return any(lane.waiting for lane in self.by_key.values())

    def waiting_ids(self) -> list[uuid.UUID]:
        return [delivery.id for lane in self.by_key.values() for delivery in lane.waiting]

    def until_sendable(self) -> float:
        """Seconds until a lane holding deliveries may start one (0 if one may now)."""
        now_mono = time.monotonic()
        return min(
            (lane.blocked_until_mono - now_mono for lane in self.by_key.values() if lane.waiting), default=0.0
        )

    def short_of_slots(self) -> bool:
        """Whether a lane under a max rate runs short of requests waiting for their slots (Lane.short_of_slots)."""
        now_mono = time.monotonic()
        return any(lane.short_of_slots(now_mono) for lane in self.rated)

    def ready_to_start(self, *, may_reserve: bool) -> Iterator[tuple[Lane, ClaimedDelivery, RateSlot | None]]:
        """The waiting deliveries each lane allows to start now, with the rate slot each must start in.

        Lazily, one at a time: the caller starts each before asking for the
        next, which counts it open. Without `may_reserve` no slots are taken
        (no database work: the event loop is running) and a lane under a max
        rate starts only what slots it already has. Under a learned rate each
        then waits for its turn too (Lane.turn_in).
        """
        now_mono = time.monotonic()
        for lane in list(self.by_key.values()):
            while lane.may_start(now_mono):
                slot = None
                if lane.settings.max_rate:
                    slot = lane.next_slot(time.time())
                    if slot is None and may_reserve:
                        lane.add_slots(
                            endpoint_take_rate_slots(
                                endpoint_id=lane.endpoint_id,
                                want=lane.slots_wanted(),
                                rate=lane.settings.max_rate,
                                now=time.time(),
                            )
                        )
                        slot = lane.next_slot(time.time())
                    if slot is None:
                        break
                yield lane, lane.take_next(), slot

    # --- stopping ---------------------------------------------------------------------

    def take_all_waiting(self) -> list[ClaimedDelivery]:
        return [delivery for lane in self.by_key.values() for delivery in lane.take_waiting()]
