"""The delivery worker loop: claim under a lease, send outside any transaction, record."""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from delivery.metrics import ATTEMPT_DURATION, CLAIM_BATCH_DURATION
from delivery.selectors import next_retry_at
from delivery.services.leases import deliveries_claim, deliveries_release, deliveries_renew_leases
from delivery.services.record import deliveries_record
from delivery.transport import ClaimedDelivery, SendResult, WebhookTransport
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
from runtime.wakeup import WORKER_CHANNEL, Listener

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 5.0
# Results are written in batches; a result waits at most this long to be written.
RECORD_LINGER = 0.05
# After losing the database, a worker takes over nobody's expired leases for
# WEBHOOK_TIMEOUT + this long once it is back. Every lease may have expired
# during an outage longer than a lease, but their workers are alive: they
# reconnect within the back-off cap (2 s, so three caps cover a slow
# reconnect), renew their leases and record what they sent, at the latest
# once the request each is waiting on ends. Taking the leases over first would
# send those messages a second time.
TAKEOVER_GRACE_BEYOND_TIMEOUT = 6.0


class Worker:
    """Sends due deliveries: on the main thread, or with a pool of threads.

    With --concurrency 1 the main thread sends itself: on a CPU-bound machine a
    single sender thread only adds GIL hand-offs (profiled: ~35% slower). With
    more, each thread holds one keep-alive session and results come back
    through a queue, so waiting for the slowest request never holds up the rest.

    A live worker renews the leases it holds every third of a lease, so a lease
    only has to outlast one request (WEBHOOK_TIMEOUT + DELIVERY_LEASE_MARGIN),
    however much work waits in this process; a worker that dies is replaced
    that soon.
    """

    def __init__(
        self,
        *,
        concurrency: int = 8,
        batch_size: int = 200,
        interval: float = 1.0,
        once: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.batch_size = max(batch_size, 1)
        self.interval = interval
        self.once = once
        self.stop = stop or threading.Event()
        self.name = process_name()
        # What this process's heartbeat row says about it.
        self.identity = {"kind": ProcessKind.WORKER, "name": self.name, "host": socket.gethostname(), "pid": os.getpid()}
        self.timeout = settings.WEBHOOK_TIMEOUT.total_seconds()
        self.lease = settings.WEBHOOK_TIMEOUT + settings.DELIVERY_LEASE_MARGIN
        self.renew_every = max(0.5, self.lease.total_seconds() / 3)
        self.transport = WebhookTransport(timeout=self.timeout, secret=settings.WEBHOOK_SECRET)
        self.pool = (
            ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="send") if concurrency > 1 else None
        )
        self.in_flight: dict[Future, ClaimedDelivery] = {}
        self.completed: queue.SimpleQueue[Future] = queue.SimpleQueue()
        self.unrecorded: list[SendResult] = []
        self.oldest_unrecorded = 0.0
        self.counts = {"processed": 0, "succeeded": 0, "failed": 0}
        self.db_backoff = Backoff()
        # Set while the database is (or just was) away: see TAKEOVER_GRACE_BEYOND_TIMEOUT.
        self.recovering = False
        self.take_over_after = 0.0
        self.listener = Listener(WORKER_CHANNEL, self.stop)
        self.last_beat = self.last_renewal = time.monotonic()

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        logger.info(
            "Worker started",
            extra={"worker": self.name, "concurrency": self.concurrency, "batch_size": self.batch_size},
        )
        self._heartbeat(start=True)
        try:
            while not self.stop.is_set():
                found = self._step_sequential() if self.pool is None else self._step_concurrent()
                self._keep_alive()
                if self.in_flight or self.unrecorded or found is None or found > 0:
                    continue  # busy, or did not look for work this round
                if self.once:
                    break
                self.listener.wait(self._idle_wait())
        finally:
            self._drain()
        return 0

    def _step_sequential(self) -> int | None:
        """Claim a batch, send it from this thread, record it. Returns how many were claimed."""
        claimed = self._claim(self.batch_size)
        if claimed is None:
            return None
        if not claimed:
            return 0
        for position, delivery in enumerate(claimed):
            if self.stop.is_set():
                self._release(claimed[position:])
                break
            self._add_result(self.transport.send(delivery))
            self._keep_alive()
        self._record_if_ready(force=True)
        return len(claimed)

    def _step_concurrent(self) -> int | None:
        """Top up the pool, collect what finished, record in batches."""
        free = self.batch_size - len(self.in_flight)
        claimed: int | None = None
        # Claim in batches (claiming 100 rows at a time is ~16x cheaper per row
        # than one at a time, measured with pgbench), but do
        # not wait for the whole batch to finish before claiming more.
        if free >= max(1, self.batch_size // 2) or not self.in_flight:
            deliveries = self._claim(free)
            claimed = deliveries if deliveries is None else len(deliveries)
            for delivery in deliveries or []:
                future = self.pool.submit(self.transport.send, delivery)
                self.in_flight[future] = delivery
                future.add_done_callback(self.completed.put)
        if self.in_flight:
            self._collect(wait=RECORD_LINGER if not claimed else 0)
        self._record_if_ready()
        return claimed

    def _claim(self, limit: int) -> list[ClaimedDelivery] | None:
        try:
            refresh_connection()
            if self.recovering:
                self._recover()
                if self.recovering:
                    return None
            started = time.perf_counter()
            claimed = deliveries_claim(
                worker=self.name,
                limit=limit,
                lease=self.lease,
                take_over_expired=time.monotonic() >= self.take_over_after,
            )
            if claimed:  # only batches that found work: an idle worker's empty polls would drown them
                CLAIM_BATCH_DURATION.labels(kind=ProcessKind.WORKER).observe(time.perf_counter() - started)
            self.db_backoff.reset()
            return claimed
        except DB_ERRORS as exc:
            self._database_unavailable("claim", exc)
            return None

    def _recover(self) -> None:
        """Back from a database outage: keep what is ours before taking anything new.

        Renew every lease this worker holds and record the outcomes it kept, so
        that no other worker takes those deliveries over and sends them again.
        """
        renewed = deliveries_renew_leases(worker=self.name, lease=self.lease)
        self.last_renewal = time.monotonic()
        self._heartbeat()
        self.last_beat = time.monotonic()
        if self.unrecorded:
            self._record_if_ready(force=True)
            if self.unrecorded:
                return  # still failing; _database_unavailable has waited
        self.recovering = False
        logger.info(
            "Database back: renewed %s lease(s), recorded held outcomes",
            renewed,
            extra={"worker": self.name},
        )

    def _collect(self, *, wait: float) -> None:
        try:
            futures = [self.completed.get(timeout=wait)] if wait else [self.completed.get_nowait()]
        except queue.Empty:
            return
        while True:
            try:
                futures.append(self.completed.get_nowait())
            except queue.Empty:
                break
        for future in futures:
            self.in_flight.pop(future, None)
            if not future.cancelled():
                self._add_result(future.result())

    def _add_result(self, result: SendResult) -> None:
        ATTEMPT_DURATION.labels(outcome=result.outcome).observe(result.duration_ms / 1000)
        if not self.unrecorded:
            self.oldest_unrecorded = time.monotonic()
        self.unrecorded.append(result)

    def _record_if_ready(self, *, force: bool = False) -> None:
        if not self.unrecorded:
            return
        ready = (
            force
            or not self.in_flight
            or len(self.unrecorded) >= max(1, self.batch_size // 2)
            or time.monotonic() - self.oldest_unrecorded >= RECORD_LINGER
        )
        if not ready:
            return
        try:
            refresh_connection()
            summary = deliveries_record(worker=self.name, results=self.unrecorded)
            self.db_backoff.reset()
        except DB_ERRORS as exc:
            # Keep the results and write them once the database is back; if the
            # lease runs out first, another worker resends with the same key.
            self._database_unavailable("record", exc)
            return
        self.counts["processed"] += len(self.unrecorded)
        self.counts["succeeded"] += summary.delivered
        self.counts["failed"] += summary.dead
        self.unrecorded = []

    def _release(self, deliveries: list[ClaimedDelivery]) -> None:
        released = deliveries_release(worker=self.name, claimed=deliveries)
        if deliveries:
            logger.info("Handed back %s unstarted deliveries", released, extra={"worker": self.name})

    def _keep_alive(self) -> None:
        """Renew held leases and write the heartbeat when they are due (cheap otherwise)."""
        now = time.monotonic()
        if now - self.last_renewal >= self.renew_every:
            self.last_renewal = now
            try:
                deliveries_renew_leases(worker=self.name, lease=self.lease)
            except DB_ERRORS as exc:
                logger.warning("Leases not renewed", extra={"worker": self.name, "error": str(exc).strip()})
                self._lost_database()
                reset_connection_after_error()
        if now - self.last_beat >= HEARTBEAT_EVERY:
            self.last_beat = now
            self._heartbeat()

    def _idle_wait(self) -> float:
        """Sleep until the next retry is due, never longer than --interval."""
        try:
            next_due = next_retry_at()
        except DB_ERRORS as exc:
            self._database_unavailable("look ahead", exc)
            return 0
        if next_due is None:
            return self.interval
        return min(self.interval, max(0.0, (next_due - timezone.now()).total_seconds()))

    def _lost_database(self) -> None:
        self.recovering = True
        self.take_over_after = time.monotonic() + self.timeout + TAKEOVER_GRACE_BEYOND_TIMEOUT

    def _database_unavailable(self, doing: str, exc: Exception) -> None:
        self._lost_database()
        wait_out_database_outage(
            self.db_backoff, exc, doing=doing, once=self.once, stop=self.stop, extra={"worker": self.name}
        )

    # --- stopping -----------------------------------------------------------------

    def _drain(self) -> None:
        """Let started sends finish, hand back the unstarted, record everything."""
        unstarted = [delivery for future, delivery in self.in_flight.items() if future.cancel()]
        if self.in_flight and len(unstarted) < len(self.in_flight):
            logger.info(
                "Waiting for %s in-flight sends to finish",
                len(self.in_flight) - len(unstarted),
                extra={"worker": self.name},
            )
        if self.pool is not None:
            self.pool.shutdown(wait=True)  # running sends end within the timeout
        self._collect_everything()
        # The database may be briefly away; try for a while before giving up
        # (the leases then recover whatever was not written).
        deadline = time.monotonic() + max(self.timeout, 10)
        while (self.unrecorded or unstarted) and time.monotonic() < deadline:
            try:
                refresh_connection()
                if self.unrecorded:
                    self._record_if_ready(force=True)
                    if self.unrecorded:
                        raise OperationalError("outcomes not yet recorded")
                self._release(unstarted)
                unstarted = []
            except DB_ERRORS:
                reset_connection_after_error()
                time.sleep(0.5)
        self._heartbeat(stopped=True)
        self.listener.close()
        logger.info("Worker stopped", extra={"worker": self.name, **self.counts})

    def _collect_everything(self) -> None:
        while True:
            try:
                future = self.completed.get_nowait()
            except queue.Empty:
                break
            self.in_flight.pop(future, None)
            if not future.cancelled():
                self._add_result(future.result())
        self.in_flight.clear()

    def _heartbeat(self, *, start: bool = False, stopped: bool = False) -> None:
        try:
            if start:
                heartbeat_start(**self.identity)
            else:
                heartbeat_beat(**self.identity, stopped=stopped, **self.counts)
        except DB_ERRORS as exc:
            logger.warning("Heartbeat not written", extra={"worker": self.name, "error": str(exc).strip()})
            self._lost_database()
            reset_connection_after_error()

