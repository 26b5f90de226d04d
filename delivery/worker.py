"""The delivery worker loop: claim under a lease, send outside any transaction, record."""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import timedelta

from django.conf import settings
from django.db import OperationalError
from django.db.models import Min
from django.utils import timezone

from config.runtime import (
    DB_ERRORS,
    ONCE_MAX_DB_FAILURES,
    Backoff,
    DatabaseUnavailable,
    process_name,
    refresh_connection,
    reset_connection_after_error,
)
from config.wakeup import WORKER_CHANNEL, Listener
from delivery.models import Delivery, DeliveryStatus
from delivery.services import ClaimedDelivery, deliveries_claim, deliveries_record, deliveries_release
from delivery.transport import SendResult, WebhookTransport
from scheduling.models import ProcessKind
from scheduling.services import heartbeat_beat, heartbeat_start

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 5.0
# Results are written in batches; a result waits at most this long to be written.
RECORD_LINGER = 0.05


class Worker:
    """Sends due deliveries with a pool of threads, one keep-alive session each."""

    def __init__(
        self,
        *,
        concurrency: int = 8,
        batch_size: int = 100,
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
        self.timeout = settings.WEBHOOK_TIMEOUT.total_seconds()
        self.lease_margin = settings.DELIVERY_LEASE_MARGIN
        self.transport = WebhookTransport(timeout=self.timeout, secret=settings.WEBHOOK_SECRET)
        self.pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="send")
        self.in_flight: dict[Future, ClaimedDelivery] = {}
        self.unrecorded: list[SendResult] = []
        self.oldest_unrecorded = 0.0
        self.counts = {"processed": 0, "succeeded": 0, "failed": 0}
        self.db_backoff = Backoff()
        self.listener = Listener(WORKER_CHANNEL, self.stop)

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        logger.info(
            "Worker started",
            extra={"worker": self.name, "concurrency": self.concurrency, "batch_size": self.batch_size},
        )
        self._heartbeat(start=True)
        last_beat = time.monotonic()
        try:
            while not self.stop.is_set():
                claimed = self._refill()
                self._collect(block=not claimed)
                self._record_if_ready()
                if time.monotonic() - last_beat >= HEARTBEAT_EVERY:
                    self._heartbeat()
                    last_beat = time.monotonic()
                if not self.in_flight and not claimed:
                    if self.unrecorded:
                        continue
                    if self.once:
                        break
                    self.listener.wait(self._idle_wait())
        finally:
            self._drain()
        return 0

    def _lease(self, count: int) -> timedelta:
        # A claimed delivery may wait behind the others in this process's queue
        # before its own request starts; the lease covers that wait, the request
        # itself (bounded by the timeout) and a margin for writing the outcome.
        rounds = math.ceil(count / self.concurrency)
        return timedelta(seconds=rounds * self.timeout) + self.lease_margin

    def _refill(self) -> int:
        free = self.batch_size - len(self.in_flight)
        # Claim in batches (per-row claims cost ~16x more: QUEUE-NOTES 1), but do
        # not wait for the whole batch to finish before claiming more.
        if free < max(1, self.batch_size // 2) and self.in_flight:
            return 0
        try:
            refresh_connection()
            waiting_ahead = len(self.in_flight)
            claimed = deliveries_claim(
                worker=self.name, limit=free, lease=lambda count: self._lease(waiting_ahead + count)
            )
            self.db_backoff.reset()
        except DB_ERRORS as exc:
            self._database_unavailable("claim", exc)
            return 0
        for delivery in claimed:
            self.in_flight[self.pool.submit(self.transport.send, delivery)] = delivery
        return len(claimed)

    def _collect(self, *, block: bool) -> None:
        if not self.in_flight:
            return
        done, _ = wait(list(self.in_flight), timeout=RECORD_LINGER if block else 0, return_when=FIRST_COMPLETED)
        for future in done:
            self.in_flight.pop(future)
            if not self.unrecorded:
                self.oldest_unrecorded = time.monotonic()
            self.unrecorded.append(future.result())

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

    def _idle_wait(self) -> float:
        """Sleep until the next retry is due, never longer than --interval."""
        try:
            next_due = Delivery.objects.filter(status=DeliveryStatus.QUEUED).aggregate(
                first=Min("next_attempt_at")
            )["first"]
        except DB_ERRORS as exc:
            self._database_unavailable("look ahead", exc)
            return 0
        if next_due is None:
            return self.interval
        return min(self.interval, max(0.0, (next_due - timezone.now()).total_seconds()))

    def _database_unavailable(self, doing: str, exc: Exception) -> None:
        delay = self.db_backoff.failed()
        if self.once and self.db_backoff.failures >= ONCE_MAX_DB_FAILURES:
            raise DatabaseUnavailable(f"Database unavailable during {doing}: {exc}") from exc
        logger.error(
            "Database unavailable during %s; retrying in %.1f s",
            doing,
            delay,
            extra={"worker": self.name, "error": str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__},
        )
        reset_connection_after_error()
        self.stop.wait(delay)

    # --- stopping -----------------------------------------------------------------

    def _drain(self) -> None:
        """Let started sends finish, hand back the unstarted, record everything."""
        unstarted = [d for f, d in self.in_flight.items() if f.cancel()]
        for future in [f for f in self.in_flight if f.cancelled()]:
            self.in_flight.pop(future)
        if self.in_flight:
            logger.info("Waiting for %s in-flight sends to finish", len(self.in_flight), extra={"worker": self.name})
        for future in list(self.in_flight):
            self.unrecorded.append(future.result())
            self.in_flight.pop(future)
        self.pool.shutdown(wait=True)
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
                released = deliveries_release(worker=self.name, ids=[d.id for d in unstarted])
                if unstarted:
                    logger.info("Handed back %s unstarted deliveries", released, extra={"worker": self.name})
                unstarted = []
            except DB_ERRORS:
                reset_connection_after_error()
                time.sleep(0.5)
        self._heartbeat(stopped=True)
        self.listener.close()
        logger.info("Worker stopped", extra={"worker": self.name, **self.counts})

    def _heartbeat(self, *, start: bool = False, stopped: bool = False) -> None:
        try:
            if start:
                heartbeat_start(
                    kind=ProcessKind.WORKER, name=self.name, host=socket.gethostname(), pid=os.getpid()
                )
            else:
                heartbeat_beat(name=self.name, stopped=stopped, **self.counts)
        except DB_ERRORS as exc:
            logger.warning("Heartbeat not written", extra={"worker": self.name, "error": str(exc).strip()})
            reset_connection_after_error()
