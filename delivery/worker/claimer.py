"""What a worker claims each turn: the failing endpoints' probes, then a batch for the lanes with room.

Claims come in batches (a statement's fixed cost is shared by every row in
it), but not only full ones, and not while the last claim came back short:
then the next waits EMPTY_CLAIM_PAUSE, or a NOTIFY, or what a recovery queued.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

from django.utils import timezone

from delivery.metrics import CLAIM_BATCH_DURATION
from delivery.models import EndpointState
from delivery.receivers.protocol import ClaimedDelivery
from delivery.rules.pace import RateSlot
from delivery.rules.takeover import TakeoverGrace
from delivery.states.endpoints import endpoint_return_probe, endpoint_take_probe, endpoint_take_rate_slots
from delivery.worker.lane import Lane
from delivery.worker.lanes import Lanes
from delivery.worker.leases import deliveries_claim
from delivery.worker.sender import Sender
from runtime.models import ProcessKind
from runtime.overlap import loop_runs_while_waiting

logger = logging.getLogger(__name__)

# After a claim found less than it asked for, the next waits this long (or a NOTIFY).
EMPTY_CLAIM_PAUSE = 0.2


class Claimer:
    """Claims for one worker's lanes, under its lease, taking expired leases over only outside the grace."""

    def __init__(
        self,
        *,
        worker: str,
        lanes: Lanes,
        sender: Sender,
        grace: TakeoverGrace,
        lease: timedelta,
        batch_size: int,
        worthwhile_batch: int,
        held_up: Callable[[], None],
        release: Callable[[list[ClaimedDelivery]], None],
    ) -> None:
        self.worker = worker
        self.lanes = lanes
        self.sender = sender
        self.grace = grace
        self.lease = lease
        self.batch_size = batch_size
        self.worthwhile_batch = worthwhile_batch
        # Asked before each claim: a claim can be the step that held the thread (delivery.rules.takeover).
        self.held_up = held_up
        # Hands claimed deliveries back to the queue (those whose endpoint went meanwhile: Lanes.hold).
        self.release = release
        self.next_claim_mono = float("-inf")

    def claim_now(self) -> None:
        """Something is due now (a NOTIFY, a recovery's batch): the next claim waits no pause."""
        self.next_claim_mono = float("-inf")

    def pausing(self, now_mono: float) -> bool:
        return now_mono < self.next_claim_mono

    def claim_more(self) -> int:
        """Take the failing endpoints' probes, then top up the lanes that take deliveries; return how many were claimed."""
        now_mono = time.monotonic()
        if self.pausing(now_mono):
            return 0
        claimed = self._claim_probes()
        room = self.lanes.room(now_mono)
        # Claim in batches, but do not wait for the whole batch to finish before claiming more.
        worthwhile = self.lanes.worth_claiming(now_mono, batch=self.worthwhile_batch)
        if room == 0 or (not worthwhile and self.lanes.holding()):
            return claimed
        want = min(room, self.batch_size)
        deliveries = self._claim(limit=want, skip_keys=self.lanes.closed_keys(now_mono))
        self.release(self.lanes.hold(deliveries))
        if len(deliveries) < want:
            self.next_claim_mono = time.monotonic() + EMPTY_CLAIM_PAUSE
        return claimed + len(deliveries)

    def _claim_probes(self) -> int:
        claimed = 0
        for lane in self._probes_due():
            if not endpoint_take_probe(endpoint_id=lane.endpoint_id, now=timezone.now(), lease=self.lease):
                continue
            deliveries = self._claim(limit=1, probe_key=lane.key)
            if not deliveries:
                # Nothing to send: the next probe may start after the current interval.
                endpoint_return_probe(endpoint_id=lane.endpoint_id, now=timezone.now())
                continue
            logger.info("Probing failing endpoint", extra={"worker": self.worker, "destination": lane.name})
            self.sender.start(lane, deliveries[0], slot=self._probe_slot(lane))
            claimed += 1
        return claimed

    def _probes_due(self) -> Iterator[Lane]:
        """The failing lanes whose next probe is due (each is won from the fleet: one worker at a time)."""
        now = timezone.now()
        for lane in list(self.lanes.by_key.values()):
            if (
                lane.state == EndpointState.FAILING
                and not lane.probing
                and lane.next_probe_at is not None
                and lane.next_probe_at <= now
            ):
                yield lane

    @staticmethod
    def _probe_slot(lane: Lane) -> RateSlot | None:
        """A probe counts against the max rate like any request: it takes a slot too (none without a max rate)."""
        if not lane.settings.max_rate:
            return None
        slots = endpoint_take_rate_slots(
            endpoint_id=lane.endpoint_id, want=1, rate=lane.settings.max_rate, now=time.time()
        )
        return slots[0]

    def _claim(self, *, limit: int, skip_keys=(), probe_key: str | None = None) -> list[ClaimedDelivery]:
        self.held_up()
        started = time.perf_counter()
        # The requests in flight go on while the claim is on the server (runtime.overlap).
        with loop_runs_while_waiting(self.sender.loop):
            claimed = deliveries_claim(
                worker=self.worker,
                limit=limit,
                lease=self.lease,
                take_over_expired=self.grace.may_take_over(time.monotonic()),
                skip_keys=skip_keys,
                probe_key=probe_key,
            )
        if claimed:  # only batches that found work: an idle worker's empty polls would drown them
            CLAIM_BATCH_DURATION.labels(kind=ProcessKind.WORKER).observe(time.perf_counter() - started)
        return claimed
