"""The worker's answers written down on a thread of their own, while its thread goes on sending.

River's batch completer: a worker that writes each batch of outcomes itself
stops sending for as long as the write takes (a few round trips and a commit,
longer on a busy server), and every request that could have started meanwhile
waits. Here the worker's thread hands a batch over and goes back to its event
loop; this thread writes it on a database connection of its own
(delivery.services.record.deliveries_record, unchanged) and the worker
collects the summary on a later turn. One batch at a time: the next one
gathers while this one is written, so batches grow when the database is slow,
and each costs the same few statements.

What is being written is still the worker's: its leases are renewed with the
rest (`held_ids`), and if the write fails (PostgreSQL away) the batch goes back
to the worker's answers and is written again once the database is back. The
thread's connection locks nothing the worker's own statements wait on in a
cycle: they are single statements or lock the endpoint row, which the write
takes last.

Inside an atomic block (a test driving the worker in its test transaction)
the batch is written on the caller's thread and connection, since another
connection would not see that transaction's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connection

from delivery.services.record import RecordSummary, deliveries_record
from delivery.transport import SendResult
from runtime.database import DB_ERRORS, refresh_connection, reset_connection_after_error


class Recorder:
    """Writes one batch of answers at a time on its own thread; the worker collects each batch's summary."""

    def __init__(self, *, worker: str) -> None:
        self.worker = worker
        self._executor: ThreadPoolExecutor | None = None
        self._pending: Future | None = None
        # The batch being written, until its summary is collected; and one whose write failed.
        self.writing: list[SendResult] = []
        self._failed: list[SendResult] = []

    @property
    def busy(self) -> bool:
        """Whether a batch was handed over and its summary not yet collected."""
        return self._pending is not None

    @property
    def running(self) -> bool:
        """Whether the batch handed over is still being written."""
        return self._pending is not None and not self._pending.done()

    def held_ids(self) -> list[uuid.UUID]:
        return [result.delivery.id for result in self.writing]

    def submit(self, results: Sequence[SendResult], *, healthy: Collection[str]) -> None:
        """Start writing `results` (none may be in writing: collect first)."""
        if self._pending is not None:
            raise RuntimeError("A batch is still being written: collect its summary first.")
        self.writing = list(results)
        if connection.in_atomic_block:
            future: Future = Future()
            try:
                future.set_result(
                    deliveries_record(worker=self.worker, results=self.writing, healthy=healthy)
                )
            except DB_ERRORS as exc:
                future.set_exception(exc)
            self._pending = future
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recorder")
        self._pending = self._executor.submit(
            _write, worker=self.worker, results=self.writing, healthy=healthy
        )

    def collect(self, *, wait: bool) -> tuple[list[SendResult], RecordSummary] | None:
        """The batch written and its summary, once written (waited for with `wait`); None if none is.

        A write that failed raises its database error here, and its batch is
        then in `take_back()`.
        """
        if self._pending is None or (not wait and not self._pending.done()):
            return None
        future = self._pending
        self._pending = None
        try:
            summary = future.result()
        except BaseException:
            self._failed, self.writing = self.writing, []
            raise
        results, self.writing = self.writing, []
        return results, summary

    def take_back(self) -> list[SendResult]:
        """The batch whose write failed, to be written again."""
        failed, self._failed = self._failed, []
        return failed

    def close(self) -> None:
        """Stop the thread, closing its connection (a batch being written is finished first)."""
        if self._executor is None:
            return
        self._executor.submit(_close_connection).result()
        self._executor.shutdown(wait=True)
        self._executor = None


def _write(*, worker: str, results: list[SendResult], healthy: Collection[str]) -> RecordSummary:
    """On the recorder's thread: one batch, on that thread's connection, dropped if it broke."""
    try:
        refresh_connection()
        return deliveries_record(worker=worker, results=results, healthy=healthy)
    except DB_ERRORS:
        reset_connection_after_error()
        raise


def _close_connection() -> None:
    # On the recorder's thread, where `connection` is that thread's own.
    connection.close()
