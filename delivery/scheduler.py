"""The scheduler loop: sleep until the next event is due, then turn due events into queued deliveries."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

from django.conf import settings
from django.db import connection
from django.utils import timezone

from delivery.metrics import CLAIM_BATCH_DURATION
from delivery.services.enqueue import deliveries_enqueue_due
from delivery.services.retention import PrunePosition, history_cutoff, history_prune
from runtime.database import (
    DB_ERRORS,
    Backoff,
    refresh_connection,
    reset_connection_after_error,
    wait_out_database_outage,
)
from runtime.heartbeats import heartbeat_beat, heartbeat_start
from runtime.models import ProcessKind
from runtime.process import process_name
from runtime.wakeup import SCHEDULER_CHANNEL, Listener
from scheduling.selectors import next_pending_target, overdue_summary
from scheduling.services.sync import RECONCILE_CHUNK, events_create_missing
from scheduling.services.zone_rules import events_follow_zone_data
from scheduling.zonedata import zone_data, zone_data_refresh

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 5.0
# When due rows exist but another scheduler holds them, look again this soon.
_BUSY_RETRY = 0.05
# Deleting old history (delivery.services.retention) between claims: a pass at most
# every PRUNE_EVERY, only when nothing is due for at least PRUNE_MIN_IDLE, for at most
# PRUNE_TIME_BOX and never past the next known target; a wake-up (an event made due
# now) ends the pass after the batch in progress and is claimed at once. The batch
# is small enough that several fit in PRUNE_MIN_IDLE even on a loaded machine, so a
# claim that falls due during a pass waits for one short batch at most. A pass cut
# short resumes where it stopped. A day's handled events (about 2,700 for a million
# recipients) fit in one pass; a backlog of millions is prune_history's.
PRUNE_EVERY = 60.0
PRUNE_TIME_BOX = 0.5
PRUNE_MIN_IDLE = 0.2
PRUNE_BATCH_SIZE = 500
# Recomputing the PENDING events after a time zone database update
# (scheduling.services.zone_rules): this long a turn, before the turn's claims,
# and the loop does not sleep until the pass is complete.
ZONE_RULES_TIME_BOX = 0.5


class Scheduler:
    def __init__(
        self,
        *,
        batch_size: int = 500,
        claimers: int = 2,
        interval: float = 1.0,
        once: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        self.batch_size = batch_size
        self.claimers = max(1, claimers)
        self.pool: ThreadPoolExecutor | None = None
        self.counts_lock = threading.Lock()
        self.interval = interval
        self.once = once
        self.stop = stop or threading.Event()
        self.name = process_name()
        # What this process's heartbeat row says about it.
        self.identity = {"kind": ProcessKind.SCHEDULER, "name": self.name, "host": socket.gethostname(), "pid": os.getpid()}
        self.listener = Listener(SCHEDULER_CHANNEL, self.stop)
        self.backoff = Backoff()
        self.counts = {"processed": 0, "succeeded": 0, "failed": 0}
        self.reconcile_every = settings.SCHEDULER_RECONCILE_INTERVAL.total_seconds()
        self.last_beat = time.monotonic()
        self.last_prune = float("-inf")
        self.prune_from: PrunePosition | None = None  # None: the next pass starts from the beginning
        self.woken = False  # a notification came during a prune pass: claim, do not sleep
        # The PENDING events may follow other time zone data than this process's: look on the first turn.
        self.zone_rules_behind = True

    def run(self) -> int:
        data = zone_data()
        logger.info("Time zone data %s from %s", data.version or "unknown", data.path, extra={"scheduler": self.name})
        self._with_database(self._log_backlog)
        self._with_database(self._heartbeat, start=True)
        last_reconcile = float("-inf")  # reconcile on the first turn, after the first claims
        while not self.stop.is_set():
            # Before the claims: an event the new rules moved later is not claimed at its old instant.
            self._with_database(self._follow_zone_rules)
            claimed = self._with_database(self._claim_all_due)
            if claimed is None:  # database unavailable; already waited
                continue
            if self.once:
                # After the claims, as in the loop below: what is due goes out
                # first. A repaired recipient's event is never due at once (it
                # is the next occurrence whose send time has not passed), so
                # nothing waits for a later run.
                while self._with_database(self._reconcile) == RECONCILE_CHUNK and not self.stop.is_set():
                    pass
                # Cron runs --once again and again: it prunes too, one time-boxed pass.
                self._with_database(self._prune_history, idle=PRUNE_TIME_BOX)
                break
            now = time.monotonic()
            if now - last_reconcile >= self.reconcile_every:
                repaired = self._with_database(self._reconcile)
                # A full chunk may mean more users to repair: do the next chunk on
                # the next turn of the loop, between claims, not in five minutes.
                last_reconcile = now - self.reconcile_every if repaired == RECONCILE_CHUNK else now
            self._with_database(self._beat_if_due)
            sleep_for = self._with_database(self._time_until_next_event)
            if sleep_for is None or self.zone_rules_behind:
                continue
            if sleep_for > 0:
                pruning = self._with_database(self._prune_history, idle=sleep_for) or 0.0
                if not self.woken:
                    self.listener.wait(sleep_for - pruning)
                self.woken = False
        if self.pool is not None:
            for _ in range(self.claimers):  # each claim thread closes its own connection
                self.pool.submit(connection.close)
            self.pool.shutdown(wait=True)
        self._with_database(self._heartbeat, stopped=True)
        self.listener.close()
        logger.info("Scheduler stopped", extra={"scheduler": self.name, **self.counts})
        return 0

    def _with_database(self, step, **kwargs):
        """Run one step; if PostgreSQL is away, log, back off and return None."""
        try:
            refresh_connection()
            result = step(**kwargs)
            self.backoff.reset()
            return result
        except DB_ERRORS as exc:
            wait_out_database_outage(
                self.backoff, exc, doing=step.__name__, once=self.once, stop=self.stop, extra={"scheduler": self.name}
            )
            return None

    def _log_backlog(self) -> None:
        summary = overdue_summary(now=timezone.now())
        logger.info(
            "Scheduler started: %s overdue event(s)%s",
            summary.count,
            f", targets from {summary.oldest.isoformat()} to {summary.newest.isoformat()}" if summary.count else "",
            extra={"scheduler": self.name, "overdue": summary.count},
        )

    def _claim_all_due(self) -> int:
        """Claim batch after batch until a batch comes back short (nothing more is due).

        With a backlog (the first batch was full) and claimers > 1, that many
        threads claim side by side, each on its own connection: SKIP LOCKED
        gives them different rows, and while one waits for PostgreSQL (its
        statements and its commit) another computes its batch, so both cores
        work (Python and PostgreSQL took turns on one thread, profiled).
        """
        first = self._claim_batch()
        if first < self.batch_size:
            return first
        if self.claimers == 1 or connection.in_atomic_block:
            # Inside a transaction (a test's) other connections could not see its rows.
            return first + self._claim_until_drained(own_connection=False)
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.claimers, thread_name_prefix="claim")
        futures = [self.pool.submit(self._claim_until_drained, own_connection=True) for _ in range(self.claimers)]
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
        with self.counts_lock:
            self.counts["processed"] += result.claimed
            self.counts["succeeded"] += result.queued
            self.counts["failed"] += result.too_late
        if result.claimed:
            # Only batches that found work: the empty look at every wake-up would drown them.
            CLAIM_BATCH_DURATION.labels(kind=ProcessKind.SCHEDULER).observe(time.perf_counter() - started)
            logger.info(
                "Claimed %s due event(s): %s queued for delivery, %s too late",
                result.claimed,
                result.queued,
                result.too_late,
                extra={"scheduler": self.name},
            )
        # Draining a large backlog can take minutes; the heartbeat must not fall
        # silent meanwhile, or the console, the metrics and check_process would
        # call a scheduler at work lost.
        self._beat_if_due()
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
        if zone_data_refresh():
            self.zone_rules_behind = True
        if self.zone_rules_behind:
            # --once completes the pass before it claims; the loop does part of it each turn.
            result = events_follow_zone_data(seconds=None if self.once else ZONE_RULES_TIME_BOX)
            self.zone_rules_behind = not result.complete

    def _reconcile(self) -> int:
        created = events_create_missing(limit=RECONCILE_CHUNK)
        if created:
            logger.warning(
                "Reconciled %s user(s) that had no pending event", created, extra={"scheduler": self.name}
            )
        return created

    def _prune_history(self, *, idle: float) -> float:
        """Delete old history in part of an idle spell of `idle` seconds; return the seconds it took."""
        started = time.monotonic()
        if idle < PRUNE_MIN_IDLE or started - self.last_prune < PRUNE_EVERY:
            return 0.0
        self.last_prune = started
        totals = history_prune(
            cutoff=history_cutoff(now=timezone.now()),
            seconds=min(idle, PRUNE_TIME_BOX),
            batch_size=PRUNE_BATCH_SIZE,
            start=self.prune_from,
            interrupted=self._woken_during_prune,
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
        return time.monotonic() - started

    def _woken_during_prune(self) -> bool:
        # A short look (1 ms) at the notification connection between batches; a --once
        # run never sleeps, so it has nothing to look for.
        if not self.once:
            self.woken = self.woken or self.listener.wait(0.001)
        return self.woken

    def _beat_if_due(self) -> None:
        """Write the heartbeat if HEARTBEAT_EVERY has passed (from the loop or any claim thread)."""
        with self.counts_lock:
            now = time.monotonic()
            if now - self.last_beat < HEARTBEAT_EVERY:
                return
            self.last_beat = now
        self._heartbeat()

    def _heartbeat(self, *, start: bool = False, stopped: bool = False) -> None:
        if start:
            heartbeat_start(**self.identity)
        else:
            heartbeat_beat(**self.identity, stopped=stopped, **self.counts)
