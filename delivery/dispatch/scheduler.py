"""The scheduler loop: sleep until the next event is due, then turn due events into queued deliveries."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from django.conf import settings
from django.db import connection
from django.utils import timezone

from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.dispatch.digests import digests_build_due
from delivery.dispatch.retention import PrunePosition, history_cutoff, history_prune
from delivery.metrics import CLAIM_BATCH_DURATION
from runtime.database import DB_ERRORS, refresh_connection, reset_connection_after_error
from runtime.loop import ProcessLoop, SideTask
from runtime.models import ProcessKind
from runtime.wakeup import SCHEDULER_CHANNEL
from scheduling.selectors import next_pending_target, overdue_summary
from scheduling.services.sync import RECONCILE_CHUNK, events_create_missing
from scheduling.services.zone_rules import events_follow_zone_data
from scheduling.zonedata import zone_data, zone_data_refresh, zone_data_version

logger = logging.getLogger(__name__)

# When due rows exist but another scheduler holds them, look again this soon.
_BUSY_RETRY = 0.05
# Deleting old history (delivery.dispatch.retention) between claims: a pass at most
# every PRUNE_EVERY, only when nothing is due for at least PRUNE_MIN_IDLE, for at most
# PRUNE_TIME_BOX and never past the next known target; a wake-up (an event made due
# now) ends the pass after the batch in progress and is claimed at once. The batch
# is small enough that several fit in PRUNE_MIN_IDLE even on a loaded machine, so a
# claim that falls due during a pass waits for one short batch at most. A pass cut
# short resumes where it stopped. A day's handled events (about 2,700 for a million
# recipients) fit in one pass; a backlog of millions is prune_history's.
PRUNE_EVERY = 60.0
# Digests are looked for every second (a digest goes within about a second of its time), a batch of
# destinations per transaction.
DIGESTS_EVERY = 1.0
DIGESTS_BATCH = 20
PRUNE_TIME_BOX = 0.5
PRUNE_MIN_IDLE = 0.2
PRUNE_BATCH_SIZE = 500
# Recomputing the PENDING events after a time zone database update
# (scheduling.services.zone_rules): this long a turn, before the turn's claims,
# and the loop does not sleep until the pass is complete.
ZONE_RULES_TIME_BOX = 0.5


class Scheduler(ProcessLoop):
    """Claims due events into queued deliveries; reconciles and prunes history as side tasks."""

    kind = ProcessKind.SCHEDULER
    HEARTBEAT_COLUMNS = {"processed": "claimed", "succeeded": "queued", "failed": "too_late"}

    def __init__(
        self,
        *,
        batch_size: int = 500,
        claimers: int = 2,
        interval: float = 1.0,
        once: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(interval=interval, once=once, stop=stop, channel=SCHEDULER_CHANNEL)
        self.batch_size = batch_size
        self.claimers = max(1, claimers)
        self.pool: ThreadPoolExecutor | None = None
        self.prune_from: PrunePosition | None = None  # None: the next pass starts from the beginning
        # The PENDING events may follow other time zone data than this process's: look on the first turn.
        self.zone_rules_behind = True
        # Reconciling comes after the first claims (what is due goes out first), then every interval.
        self.side_tasks += [
            # Every second: when none is due it is one probe of a partial index (no digest destination: empty).
            SideTask("digests", DIGESTS_EVERY, self._build_digests),
            SideTask("reconcile", settings.SCHEDULER_RECONCILE_INTERVAL.total_seconds(), self._reconcile),
            SideTask("prune history", PRUNE_EVERY, self._prune_history, min_idle=PRUNE_MIN_IDLE),
        ]

    def reported_zone_data(self) -> str:
        return zone_data_version()

    def run(self) -> int:
        data = zone_data()
        logger.info(
            "Time zone data %s from %s", data.version or "unknown", data.path, extra={"scheduler": self.name}
        )
        self.with_database(self._log_backlog)
        self.heartbeat(start=True)
        while not self.stop.is_set():
            # Before the claims: an event the new rules moved later is not claimed at its old instant.
            self.with_database(self._follow_zone_rules)
            claimed = self.with_database(self._claim_all_due)
            if claimed is None:  # database unavailable; already waited
                continue
            if self.once:
                # After the claims, as in the loop: what is due goes out first. A
                # repaired recipient's event is never due at once (it is the next
                # occurrence whose send time has not passed), so nothing waits for
                # a later run. Cron runs --once again and again: it prunes too.
                self.run_side_tasks_to_the_end()
                break
            self.run_side_tasks()
            sleep_for = self.with_database(self._time_until_next_event)
            if sleep_for is None or self.zone_rules_behind:
                continue
            if sleep_for > 0:
                self.rest(sleep_for)
        if self.pool is not None:
            for _ in range(self.claimers):  # each claim thread closes its own connection
                self.pool.submit(connection.close)
            self.pool.shutdown(wait=True)
        self.close()
        logger.info("Scheduler stopped", extra={"scheduler": self.name, **self.counted})
        return 0

    def _log_backlog(self) -> None:
        summary = overdue_summary(now=timezone.now())
        logger.info(
            "Scheduler started: %s overdue event(s)%s",
            summary.count,
            f", targets from {summary.oldest.isoformat()} to {summary.newest.isoformat()}"
            if summary.oldest is not None and summary.newest is not None  # as many as there are overdue
            else "",
            extra={"scheduler": self.name, "overdue": summary.count},
        )

    def _claim_all_due(self) -> int:
        """Claim batch after batch until a batch comes back short (nothing more is due).

        With a backlog (the first batch was full) and claimers > 1, that many
        threads claim side by side, each on its own connection: SKIP LOCKED
        gives them different rows, and while one waits for PostgreSQL (its
        statements and its commit) another computes its batch, so both cores
        work: on one thread, Python and PostgreSQL would only take turns.
        """
        first = self._claim_batch()
        if first < self.batch_size:
            return first
        if self.claimers == 1 or connection.in_atomic_block:
            # Inside a transaction (a test's) other connections could not see its rows.
            return first + self._claim_until_drained(own_connection=False)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.claimers, thread_name_prefix="claim")
        futures = [
            self.pool.submit(self._claim_until_drained, own_connection=True) for _ in range(self.claimers)
        ]
        # Every claimer finishes before an error (the database went away) is
        # raised, so the outage back-off never runs beside a claimer still at work.
        wait(futures)
        return first + sum(future.result() for future in futures)

    def _claim_until_drained(self, *, own_connection: bool) -> int:
        total = 0
        try:
            while not self.stop.is_set():
                if own_connection:
                    refresh_connection()
                claimed = self._claim_batch()
                total += claimed
                if claimed < self.batch_size:
                    break
        except DB_ERRORS:
            if own_connection:
                reset_connection_after_error()
            raise
        return total

    def _claim_batch(self) -> int:
        started = time.perf_counter()
        result = deliveries_enqueue_due(now=timezone.now(), batch_size=self.batch_size)
        self.count(claimed=result.claimed, queued=result.queued, too_late=result.too_late)
        if result.claimed:
            # Only batches that found work: the empty look at every wake-up would drown them.
            CLAIM_BATCH_DURATION.labels(kind=ProcessKind.SCHEDULER).observe(time.perf_counter() - started)
            # Every claimed event in one of the four: the parts add up to the claim.
            logger.info(
                "Claimed %s due event(s): %s queued for delivery, %s too late, %s held back by a pause, "
                "%s with no destination subscribed",
                result.claimed,
                result.queued,
                result.too_late,
                result.paused,
                result.unsubscribed,
                extra={
                    "scheduler": self.name,
                    "claimed": result.claimed,
                    "queued": result.queued,
                    "too_late": result.too_late,
                    "paused": result.paused,
                    "unsubscribed": result.unsubscribed,
                },
            )
        # Draining a large backlog can take minutes; the heartbeat must not fall
        # silent meanwhile, or the console, the metrics and check_process would
        # call a scheduler at work lost.
        self.beat_if_due()
        return result.claimed

    def _time_until_next_event(self) -> float:
        now = timezone.now()
        next_target = next_pending_target()
        if next_target is None:
            return self.interval
        wait = (next_target - now).total_seconds()
        if wait <= 0:
            # Due but not claimable: another scheduler holds the rows right now.
            return _BUSY_RETRY
        return min(self.interval, wait)

    def _follow_zone_rules(self) -> None:
        # The turn's seam for a time zone database update (scheduling.zonedata), first in every turn.
        if zone_data_refresh():
            self.zone_rules_behind = True
        if self.zone_rules_behind:
            # --once completes the pass before it claims; the loop does part of it each turn.
            result = events_follow_zone_data(seconds=None if self.once else ZONE_RULES_TIME_BOX)
            self.zone_rules_behind = not result.complete

    def _build_digests(self, *, idle: float) -> bool:
        """Queue the daily digests now due (delivery.dispatch.digests); True when a full batch leaves more."""
        built = digests_build_due(now=timezone.now(), limit=DIGESTS_BATCH)
        return built.handled == DIGESTS_BATCH

    def _reconcile(self, *, idle: float) -> bool:
        """Create the missing pending events of a chunk of recipients; True when the chunk was full (more may wait)."""
        created = events_create_missing(limit=RECONCILE_CHUNK)
        if created:
            logger.warning(
                "Reconciled %s user(s) that had no pending event", created, extra={"scheduler": self.name}
            )
        # A full chunk may mean more users to repair: the next chunk comes on
        # the next turn of the loop, between claims, not an interval later.
        return created == RECONCILE_CHUNK

    def _prune_history(self, *, idle: float) -> None:
        """Delete old history for part of an idle spell of `idle` seconds; a pass cut short resumes next time."""
        totals = history_prune(
            cutoff=history_cutoff(now=timezone.now()),
            seconds=min(idle, PRUNE_TIME_BOX),
            batch_size=PRUNE_BATCH_SIZE,
            start=self.prune_from,
            interrupted=self.woken_meanwhile,
        )
        self.prune_from = totals.next
        if totals.events:
            logger.info(
                "Pruned history: %s event(s), %s deliveries, %s attempts",
                totals.events,
                totals.deliveries,
                totals.attempts,
                extra={"scheduler": self.name},
            )
