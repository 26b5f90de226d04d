"""The delivery worker: claim under a lease, send outside any transaction, record.

One thread does everything, a turn at a time: read the endpoints' state, claim
what the lanes have room for, start what may go out, run the open requests for
a slice, record the answers, then the side tasks (lease renewal, expiry). Each
step raises when PostgreSQL is away; the loop (runtime.loop.ProcessLoop)
catches that once per turn, waits it out, and the next turn begins by keeping
what this worker holds (`_recover`) before it takes anything new.

Which requests may go out is delivery.worker.lanes' decision; delivery.worker.sender runs them.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.utils import timezone

from delivery.receivers.lane_settings import lane_settings
from delivery.receivers.protocol import ClaimedDelivery
from delivery.receivers.transports import transports_make
from delivery.rules.takeover import TakeoverGrace
from delivery.selectors import next_retry_at
from delivery.worker.claimer import Claimer
from delivery.worker.lanes import Lanes
from delivery.worker.leases import deliveries_release, deliveries_renew_leases
from delivery.worker.record import deliveries_record
from delivery.worker.sender import Sender
from delivery.worker.tasks import DestinationRecoveries, maintenance_tasks
from runtime.database import DB_ERRORS, refresh_connection, reset_connection_after_error
from runtime.loop import ProcessLoop, SideTask
from runtime.models import ProcessKind
from runtime.overlap import loop_runs_while_waiting
from runtime.wakeup import WORKER_CHANNEL
from scheduling.zonedata import zone_data_refresh, zone_data_version

logger = logging.getLogger(__name__)

# The most the event loop runs before the thread looks at leases, heartbeat and endpoints.
LOOP_SLICE = 0.25
# A stopping worker tries this long at least to record its answers and hand back the unstarted.
DRAIN_WRITE_FOR = 10.0


class Worker(ProcessLoop):
    """Sends due deliveries to their receivers at each receiver's pace.

    A live worker renews the leases it holds every third of a lease, so a lease
    only has to outlast one request (WEBHOOK_TIMEOUT + DELIVERY_LEASE_MARGIN),
    however much work waits in this process; a worker that dies is replaced
    that soon.
    """

    kind = ProcessKind.WORKER
    HEARTBEAT_COLUMNS = {"processed": "sent", "succeeded": "delivered", "failed": "dead"}

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        batch_size: int = 200,
        interval: float = 1.0,
        once: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(interval=interval, once=once, stop=stop, channel=WORKER_CHANNEL)
        self.concurrency = concurrency
        self.batch_size = max(batch_size, 1)
        # Claims and records come in batches (a statement's fixed cost is shared by
        # every row in it), but not only full ones: half a batch is worth a statement.
        self.worthwhile_batch = max(1, self.batch_size // 2)
        self.timeout = settings.WEBHOOK_TIMEOUT.total_seconds()
        self.lease = settings.WEBHOOK_TIMEOUT + settings.DELIVERY_LEASE_MARGIN
        self.lanes = Lanes(
            worker=self.name, concurrency=concurrency, batch_size=self.batch_size, lease=self.lease
        )
        self.sender = Sender(
            transports=transports_make(timeout=self.timeout), after_each=self._start_ready_without_reserving
        )
        # Every third of a lease: the leases of what this worker holds outlast the request each waits on.
        renew_every = max(0.5, self.lease.total_seconds() / 3)
        self.renew_leases = SideTask("lease renewal", renew_every, self._renew_leases)
        # A step that held the thread past a lease renewal was an outage too (delivery.rules.takeover).
        self.grace = TakeoverGrace(
            timeout=self.timeout, held_up_after=self.renew_leases.every, now_mono=time.monotonic()
        )
        self.claimer = Claimer(
            worker=self.name,
            lanes=self.lanes,
            sender=self.sender,
            grace=self.grace,
            lease=self.lease,
            batch_size=self.batch_size,
            worthwhile_batch=self.worthwhile_batch,
            held_up=self._held_up,
            release=self._release,
        )
        # First due an interval after the start: the heartbeat follows heartbeat(start=True).
        self.heartbeat_task.last = self.renew_leases.last = time.monotonic()
        self.recoveries = DestinationRecoveries()
        self.side_tasks += [self.renew_leases, *maintenance_tasks(), self.recoveries.task]

    def reported_zone_data(self) -> str:
        return zone_data_version()

    def database_lost(self) -> None:
        self.grace.lost(time.monotonic())

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        defaults = lane_settings()  # what a destination with no limits of its own gets
        logger.info(
            "Worker started",
            extra={
                "worker": self.name,
                "concurrency": self.concurrency or "adaptive",
                "batch_size": self.batch_size,
                "max_rate": defaults.max_rate or None,
                "max_in_flight": defaults.max_in_flight or None,
                "zone_data": zone_data_version(),
            },
        )
        self.heartbeat(start=True)
        self.sender.open()
        self.grace.rested(time.monotonic())
        try:
            while not self.stop.is_set():
                busy = self.with_database(self._deliver)
                if busy is None or busy:
                    continue  # work in hand, or the database was away and the loop has waited
                if self.once:
                    break
                self.with_database(self._rest)
        finally:
            self._drain()
            self.sender.close()
        return 0

    def _deliver(self) -> bool:
        """Claim, start, send for a slice, record; return whether work is in hand."""
        # The turn's seam for a time zone database update: the version this worker
        # reports follows its host's data like the scheduler's (it computes nothing with zones).
        zone_data_refresh()
        self._held_up()
        if self.grace.recovery_due:
            self._recover()
        self._release(self.lanes.refresh_if_due())
        claimed = 0 if self.stop.is_set() else self.claimer.claim_more()
        self._start_ready(may_reserve=True)
        if self.sender.busy:
            self.sender.run(seconds=LOOP_SLICE, return_when=self._worth_returning)
        elif self.lanes.waiting():
            self.stop.wait(min(LOOP_SLICE, max(0.01, self.lanes.until_sendable())))
        self._record_if_ready()
        self.run_side_tasks()
        recovering, queued = self.recoveries.took()
        if queued:
            self.claimer.claim_now()  # what a recovery queued is due now: claimed next turn
        return bool(claimed or self.lanes.waiting() or self.sender.busy or self.sender.answers or recovering)

    def _rest(self) -> None:
        """Nothing in hand: sleep until a NOTIFY or the next retry is due, never longer than --interval."""
        next_due = next_retry_at()
        seconds = self.interval
        if next_due is not None:
            seconds = min(self.interval, max(0.0, (next_due - timezone.now()).total_seconds()))
        self.listener.wait(seconds)
        self.grace.rested(time.monotonic())
        self.claimer.claim_now()

    def _held_up(self) -> None:
        """A step that held the thread past a lease renewal is an outage too (delivery.rules.takeover); _recover renews."""
        held = self.grace.stepped(time.monotonic())
        if held is not None:
            logger.warning(
                "A database step held the worker %.1f s: taking over no lease until its grace has passed",
                held,
                extra={"worker": self.name},
            )

    def _recover(self) -> None:
        """Back from a database outage: keep what is ours before taking anything new.

        Renew the leases of what this worker holds and record the answers it
        kept, so that no other worker takes those deliveries over and sends
        them again.
        """
        renewed = self._renew_held_leases()
        self.renew_leases.last = time.monotonic()
        self.heartbeat()
        self._record_if_ready(force=True)
        self.grace.recovered()
        logger.info(
            "Database back: renewed %s lease(s), recorded held outcomes",
            renewed,
            extra={"worker": self.name},
        )

    # --- sending ----------------------------------------------------------------

    def _start_ready(self, *, may_reserve: bool) -> None:
        for lane, delivery, slot in self.lanes.ready_to_start(may_reserve=may_reserve):
            self.sender.start(lane, delivery, slot=slot)

    def _start_ready_without_reserving(self) -> None:
        # Called inside the event loop as each request finishes: no database work there.
        self._start_ready(may_reserve=False)

    def _worth_returning(self) -> bool:
        """Whether to give the thread back to claim or record: asked after each finished request."""
        if (
            self.stop.is_set()
            or self.sender.answers_due(batch=self.worthwhile_batch)
            or self.lanes.short_of_slots()
        ):
            return True
        now_mono = time.monotonic()
        if self.claimer.pausing(now_mono):
            return False
        return self.lanes.room(now_mono) >= self.worthwhile_batch and not self.lanes.waiting()

    # --- recording --------------------------------------------------------------

    def _record_if_ready(self, *, force: bool = False) -> None:
        """Record the answers now if they make a batch, nothing else is open, or `force`.

        If the database is away the answers stay held, to be recorded once it
        is back; if the lease runs out first, another worker resends with the
        same key.
        """
        answers = self.sender.answers
        if not answers or not (
            force or not self.sender.busy or self.sender.answers_due(batch=self.worthwhile_batch)
        ):
            return
        answers = self.sender.take_answers()
        try:
            # The requests in flight go on while the record is on the server (runtime.overlap).
            with loop_runs_while_waiting(self.sender.loop):
                summary = deliveries_record(
                    worker=self.name, results=answers, healthy=self.lanes.healthy_keys()
                )
        except BaseException:
            self.sender.answers_back(answers)
            raise
        self.lanes.follow_verdicts(summary.verdicts)
        self.count(sent=len(answers), delivered=summary.delivered, dead=summary.dead)

    def _release(self, deliveries: list[ClaimedDelivery]) -> None:
        if not deliveries:
            return
        released = deliveries_release(worker=self.name, claimed=deliveries)
        logger.info("Handed back %s unstarted deliveries", released, extra={"worker": self.name})

    def _renew_held_leases(self) -> int:
        """Renew the leases of what this worker has in hand, and of nothing else under its name.

        After a failover that lost the last commits, the new primary may show
        rows SENDING under this worker whose outcomes it recorded on the lost
        timeline: those are left to expire and be taken over, not kept forever.
        """
        held = self.lanes.waiting_ids() + self.sender.held_ids()
        return deliveries_renew_leases(worker=self.name, ids=held, lease=self.lease)

    def _renew_leases(self, *, idle: float) -> None:
        self._renew_held_leases()

    # --- stopping -----------------------------------------------------------------

    def _drain(self) -> None:
        """Let begun requests finish, hand back the unstarted, record everything.

        Outside the loop, so not its outage back-off (the stop is set and would
        cut every pause short): a bounded retry of its own. What it cannot
        write, the leases recover.
        """
        unstarted = self.lanes.take_all_waiting()
        if begun := len(self.sender.begun):
            logger.info("Waiting for %s in-flight sends to finish", begun, extra={"worker": self.name})
        # Begun requests end within the timeout.
        unstarted += self.sender.drain(timeout=self.timeout + 5)
        deadline_mono = time.monotonic() + max(self.timeout, DRAIN_WRITE_FOR)
        while (self.sender.answers or unstarted) and time.monotonic() < deadline_mono:
            try:
                refresh_connection()
                self._record_if_ready(force=True)
                self._release(unstarted)
                unstarted = []
            except DB_ERRORS:
                reset_connection_after_error()
                time.sleep(0.5)
        try:
            self.lanes.release_shares()
        except DB_ERRORS:
            reset_connection_after_error()  # the shares' leases run out by themselves
        self.close()
        logger.info("Worker stopped", extra={"worker": self.name, **self.counted})
