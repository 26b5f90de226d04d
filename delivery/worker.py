"""The delivery worker: claim under a lease, send outside any transaction, record.

One thread does everything, a turn at a time: read the endpoints' state, claim
what the lanes have room for, start what may go out, run the open requests for
a slice, record the answers, then the side tasks (lease renewal, expiry). Each
step raises when PostgreSQL is away; the loop (runtime.loop.ProcessLoop)
catches that once per turn, waits it out, and the next turn begins by keeping
what this worker holds (`_recover`) before it takes anything new.

Which requests may go out is delivery.lanes' decision; delivery.sender runs them.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.utils import timezone

from delivery.lanes import Lanes
from delivery.metrics import CLAIM_BATCH_DURATION
from delivery.selectors import next_retry_at
from delivery.sender import Sender
from delivery.services.destinations import destination_secrets_drop_expired
from delivery.services.expiry import deliveries_expire_late
from delivery.services.leases import deliveries_claim, deliveries_release, deliveries_renew_leases
from delivery.services.record import deliveries_record
from delivery.services.recovery import recoveries_advance
from delivery.transport import ClaimedDelivery, WebhookTransport
from runtime.database import DB_ERRORS, refresh_connection, reset_connection_after_error
from runtime.loop import ProcessLoop, SideTask
from runtime.models import ProcessKind
from runtime.wakeup import WORKER_CHANNEL
from scheduling.zonedata import zone_data_refresh, zone_data_version

logger = logging.getLogger(__name__)

# After losing the database, a worker takes over nobody's expired leases for
# WEBHOOK_TIMEOUT + this long once it is back. Every lease may have expired
# during an outage longer than a lease, but their workers are alive: they
# reconnect within the back-off cap (2 s, so three caps cover a slow
# reconnect), renew their leases and record what they sent, at the latest
# once the request each is waiting on ends. Taking the leases over first would
# send those messages a second time.
TAKEOVER_GRACE_BEYOND_TIMEOUT = 6.0
# How often deliveries still waiting EVENT_MAX_LATENESS after being queued are
# failed (more often when the lateness itself is short).
EXPIRE_EVERY = 60.0
# The most the event loop runs before the thread looks at leases, heartbeat and endpoints.
LOOP_SLICE = 0.25
# After a claim found less than it asked for, the next waits this long (or a NOTIFY).
EMPTY_CLAIM_PAUSE = 0.2
# A stopping worker tries this long at least to record its answers and hand back the unstarted.
DRAIN_WRITE_FOR = 10.0
# How often a worker looks for a destination's recovery to advance; while one runs, a batch every turn.
RECOVERIES_EVERY = 1.0


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
            worker=self.name,
            concurrency=concurrency,
            batch_size=self.batch_size,
            max_rate=settings.WEBHOOK_MAX_RATE,
            max_in_flight=settings.WEBHOOK_MAX_IN_FLIGHT,
            lease=self.lease,
        )
        transport = WebhookTransport(timeout=self.timeout)
        self.sender = Sender(transport=transport, after_each=self._start_ready_without_reserving)
        # Set from an outage until this worker has renewed its leases and recorded
        # its answers (see TAKEOVER_GRACE_BEYOND_TIMEOUT).
        self.recovering = False
        self.take_over_after_mono = 0.0
        # When the loop last moved on from one step to the next (see _held_up).
        self.progress_mono = 0.0
        self.next_claim_mono = float("-inf")
        self.renew_leases = SideTask(
            "lease renewal", max(0.5, self.lease.total_seconds() / 3), self._renew_leases
        )
        self.side_tasks += [
            self.renew_leases,
            SideTask(
                "expiry of late deliveries",
                min(EXPIRE_EVERY, settings.EVENT_MAX_LATENESS.total_seconds() / 4),
                self._expire_late,
            ),
            SideTask("drop of expired signing secrets", EXPIRE_EVERY, self._drop_expired_secrets),
        ]
        # Both are first due an interval after the start, like the heartbeat after heartbeat(start=True).
        for task in self.side_tasks:
            task.last = time.monotonic()
        # A recovery left unfinished (its worker killed) is taken up at once, by a --once run too.
        self.advance_recoveries = SideTask(
            "recovery of destinations", RECOVERIES_EVERY, self._advance_recoveries
        )
        self.side_tasks.append(self.advance_recoveries)
        # Whether the last turn's recovery batch queued something or left more: the turn had work.
        self.recovering_destinations = False

    def reported_zone_data(self) -> str:
        return zone_data_version()

    def database_lost(self) -> None:
        self.recovering = True
        self.take_over_after_mono = time.monotonic() + self.timeout + TAKEOVER_GRACE_BEYOND_TIMEOUT

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        logger.info(
            "Worker started",
            extra={
                "worker": self.name,
                "concurrency": self.concurrency or "adaptive",
                "batch_size": self.batch_size,
                "max_rate": self.lanes.max_rate or None,
                "max_in_flight": self.lanes.max_in_flight or None,
                "zone_data": zone_data_version(),
            },
        )
        self.heartbeat(start=True)
        self.sender.open()
        self.progress_mono = time.monotonic()
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
        if self.recovering:
            self._recover()
        self._release(self.lanes.refresh_if_due())
        claimed = self._claim_more()
        self._start_ready(may_reserve=True)
        if self.sender.busy:
            self.sender.run(seconds=LOOP_SLICE, return_when=self._worth_returning)
        elif self.lanes.waiting():
            self.stop.wait(min(LOOP_SLICE, max(0.01, self.lanes.until_sendable())))
        self._record_if_ready()
        self.recovering_destinations = False
        self.run_side_tasks()
        return bool(
            claimed
            or self.lanes.waiting()
            or self.sender.busy
            or self.sender.answers
            or self.recovering_destinations
        )

    def _rest(self) -> None:
        """Nothing in hand: sleep until a NOTIFY or the next retry is due, never longer than --interval."""
        next_due = next_retry_at()
        seconds = self.interval
        if next_due is not None:
            seconds = min(self.interval, max(0.0, (next_due - timezone.now()).total_seconds()))
        self.listener.wait(seconds)
        self.progress_mono = time.monotonic()  # sleeping is not being held up
        self.next_claim_mono = float("-inf")

    def _held_up(self) -> None:
        """A step that held the thread past a lease renewal without an error was an outage too.

        Behind PgBouncer a statement sent while PostgreSQL is away may wait for
        a server connection instead of failing (its query_wait_timeout): the
        worker sees a slow step, not an outage, while the workers that did see
        one are in their back-off, their leases expiring. Taking those over now
        would send their messages again, so the same grace applies as after an
        error. Its own leases were not renewed either: _recover renews them.
        """
        now_mono = time.monotonic()
        held = now_mono - self.progress_mono
        self.progress_mono = now_mono
        if held > self.renew_leases.every and not self.recovering:
            logger.warning(
                "A database step held the worker %.1f s: taking over no lease until its grace has passed",
                held,
                extra={"worker": self.name},
            )
            self.database_lost()

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
        self.recovering = False
        logger.info(
            "Database back: renewed %s lease(s), recorded held outcomes",
            renewed,
            extra={"worker": self.name},
        )

    # --- claiming ---------------------------------------------------------------

    def _claim_more(self) -> int:
        """Take the failing endpoints' probes, then top up the lanes that take deliveries; return how many were claimed."""
        now_mono = time.monotonic()
        if now_mono < self.next_claim_mono or self.stop.is_set():
            return 0
        claimed = self._claim_probes()
        room = self.lanes.room(now_mono)
        # Claim in batches, but do not wait for the whole batch to finish before claiming more.
        worthwhile = self.lanes.worth_claiming(now_mono, batch=self.worthwhile_batch)
        if room == 0 or (not worthwhile and self.lanes.holding()):
            return claimed
        want = min(room, self.batch_size)
        deliveries = self._claim(limit=want, skip_keys=self.lanes.closed_keys(now_mono))
        self._release(self.lanes.hold(deliveries))
        if len(deliveries) < want:
            self.next_claim_mono = time.monotonic() + EMPTY_CLAIM_PAUSE
        return claimed + len(deliveries)

    def _claim_probes(self) -> int:
        claimed = 0
        for lane in self.lanes.probes_due():
            if not self.lanes.take_probe(lane):
                continue
            deliveries = self._claim(limit=1, probe_key=lane.key)
            if not deliveries:
                self.lanes.return_probe(lane)
                continue
            logger.info("Probing failing endpoint", extra={"worker": self.name, "destination": lane.name})
            self.sender.start(lane, deliveries[0], slot_mono=None)
            claimed += 1
        return claimed

    def _claim(self, *, limit: int, skip_keys=(), probe_key: str | None = None) -> list[ClaimedDelivery]:
        self._held_up()
        started = time.perf_counter()
        claimed = deliveries_claim(
            worker=self.name,
            limit=limit,
            lease=self.lease,
            take_over_expired=time.monotonic() >= self.take_over_after_mono,
            skip_keys=skip_keys,
            probe_key=probe_key,
        )
        if claimed:  # only batches that found work: an idle worker's empty polls would drown them
            CLAIM_BATCH_DURATION.labels(kind=ProcessKind.WORKER).observe(time.perf_counter() - started)
        return claimed

    # --- sending ----------------------------------------------------------------

    def _start_ready(self, *, may_reserve: bool) -> None:
        for lane, delivery, slot_mono in self.lanes.ready_to_start(may_reserve=may_reserve):
            self.sender.start(lane, delivery, slot_mono=slot_mono)

    def _start_ready_without_reserving(self) -> None:
        # Called inside the event loop as each request finishes: no database work there.
        self._start_ready(may_reserve=False)

    def _worth_returning(self) -> bool:
        """Whether to give the thread back to claim or record: asked after each finished request."""
        if self.stop.is_set() or self.sender.answers_due(batch=self.worthwhile_batch):
            return True
        now_mono = time.monotonic()
        if now_mono < self.next_claim_mono:
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
        summary = deliveries_record(worker=self.name, results=answers, healthy=self.lanes.healthy_keys())
        self.sender.answers_recorded()
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
        waiting = [delivery.id for lane in self.lanes.by_key.values() for delivery in lane.waiting]
        return deliveries_renew_leases(
            worker=self.name, ids=waiting + self.sender.held_ids(), lease=self.lease
        )

    def _renew_leases(self, *, idle: float) -> None:
        """Every third of a lease: the leases of what this worker holds outlast the request each waits on."""
        self._renew_held_leases()

    def _expire_late(self, *, idle: float) -> None:
        deliveries_expire_late(now=timezone.now())

    def _advance_recoveries(self, *, idle: float) -> bool:
        """One batch of a destination's recovery per turn: the sending goes on between batches.

        Returns whether more is left (the task is then due again next turn).
        """
        batch = recoveries_advance()
        self.recovering_destinations = batch is not None and (batch.more or batch.requeued > 0)
        if batch is not None and batch.requeued:
            # What it queued is due now: claim it this turn rather than after a rest.
            self.next_claim_mono = float("-inf")
        return batch is not None and batch.more

    def _drop_expired_secrets(self, *, idle: float) -> None:
        # The lanes already stopped signing with them at expiry; this only removes the rows.
        destination_secrets_drop_expired(now=timezone.now())

    # --- stopping -----------------------------------------------------------------

    def _drain(self) -> None:
        """Let begun requests finish, hand back the unstarted, record everything.

        Outside the loop, so not its outage back-off (the stop is set and would
        cut every pause short): a bounded retry of its own. What it cannot
        write, the leases recover.
        """
        unstarted = self.lanes.take_all_waiting()
        if self.sender.busy:
            logger.info(
                "Waiting for %s in-flight sends to finish",
                len(self.sender.begun),
                extra={"worker": self.name},
            )
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
