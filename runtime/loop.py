"""What every long-running process shares: its identity and heartbeat, database outages, side tasks.

run_scheduler and run_worker each run one `ProcessLoop`: the main work is
theirs (claiming due events; sending deliveries), and around it this class
keeps the heartbeat row current, counts the work under names that say what
was counted, waits out database outages with a growing pause, sleeps until a
NOTIFY or the next known work, and runs the process's side tasks. A side task
(reconciling, pruning history, renewing leases) is done between the main
steps at most every so often, as Oban's plugins run beside its queues: no
thread of its own, so it never races the main work for the connection.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypedDict, TypeVar

from runtime.database import (
    DB_ERRORS,
    Backoff,
    database_error_reason,
    refresh_connection,
    reset_connection_after_error,
    wait_out_database_outage,
)
from runtime.heartbeats import heartbeat_beat, heartbeat_start
from runtime.process import process_name
from runtime.wakeup import Listener

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY = 5.0

_T = TypeVar("_T")


class ProcessIdentity(TypedDict):
    """What a process's heartbeat row says about it."""

    kind: str
    name: str
    host: str
    pid: int


@dataclass
class SideTask:
    """Work a process does besides its own, between its main steps, at most every `every` seconds.

    `step(idle=...)` is given the seconds the loop has before its next main
    work (0 while busy) and returns True when more is waiting at once, which
    makes the task due again on the next turn rather than `every` later. A
    task with `min_idle` runs only in an idle spell at least that long.
    """

    name: str
    every: float
    step: Callable[..., bool | None]
    min_idle: float = 0.0
    last: float = float("-inf")

    def due(self, *, now: float, idle: float) -> bool:
        return now - self.last >= self.every and idle >= self.min_idle


class ProcessLoop:
    """The scaffolding of a long-running process; subclasses do the main work in `run`."""

    kind: ClassVar[str]
    # What the heartbeat row's three generic columns hold for this kind of
    # process: {column: the name this process counts it under}.
    HEARTBEAT_COLUMNS: ClassVar[dict[str, str]]

    def __init__(self, *, interval: float, once: bool, stop: threading.Event | None, channel: str) -> None:
        self.interval = interval
        self.once = once
        self.stop = stop or threading.Event()
        self.name = process_name()
        # What this process's heartbeat row says about it.
        self.identity: ProcessIdentity = {
            "kind": self.kind,
            "name": self.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        self.counted = dict.fromkeys(self.HEARTBEAT_COLUMNS.values(), 0)
        self.counts_lock = threading.Lock()
        self.backoff = Backoff()
        self.listener = Listener(channel, self.stop)
        self.heartbeat_task = SideTask("heartbeat", HEARTBEAT_EVERY, self._beat)
        self.side_tasks: list[SideTask] = [self.heartbeat_task]
        # A NOTIFY arrived while a side task used an idle spell: do the main work, do not sleep.
        self.woken = False

    # --- hooks ------------------------------------------------------------------

    def run(self) -> int:
        """The main work, until stopped (or, with --once, until none is left); the exit status."""
        raise NotImplementedError

    def reported_zone_data(self) -> str:
        """The IANA version of the time zone data the process computes with, for its heartbeat row."""
        raise NotImplementedError

    def database_lost(self) -> None:
        """Called when a step found the database away, before the pause."""

    # --- counting and the heartbeat ---------------------------------------------

    def count(self, **increments: int) -> None:
        with self.counts_lock:
            for name, increment in increments.items():
                self.counted[name] += increment

    def heartbeat(self, *, start: bool = False, stopped: bool = False) -> None:
        """Write this process's heartbeat row now; a database error is logged, and the next step waits it out."""
        try:
            if start:
                heartbeat_start(**self.identity, zone_data=self.reported_zone_data())
            else:
                columns = {column: self.counted[name] for column, name in self.HEARTBEAT_COLUMNS.items()}
                heartbeat_beat(
                    **self.identity,
                    zone_data=self.reported_zone_data(),
                    processed=columns["processed"],
                    succeeded=columns["succeeded"],
                    failed=columns["failed"],
                    stopped=stopped,
                )
            self.heartbeat_task.last = time.monotonic()
        except DB_ERRORS as exc:
            self._side_task_failed("heartbeat", exc)

    def beat_if_due(self) -> None:
        """The heartbeat, if it is due; from the loop or any thread at work (a long drain must not look lost)."""
        with self.counts_lock:
            now = time.monotonic()
            if not self.heartbeat_task.due(now=now, idle=0.0):
                return
            self.heartbeat_task.last = now
        self.heartbeat()

    def _beat(self, *, idle: float) -> None:
        self.heartbeat()

    # --- the database -----------------------------------------------------------

    def with_database(self, step: Callable[..., _T], **kwargs: Any) -> _T | None:
        """Run one main step; if PostgreSQL is away, log, pause (longer each time) and return None."""
        try:
            refresh_connection()
            result = step(**kwargs)
            self.backoff.reset()
            return result
        except DB_ERRORS as exc:
            self.database_unavailable(getattr(step, "__name__", "a step").strip("_").replace("_", " "), exc)
            return None

    def database_unavailable(self, doing: str, exc: Exception) -> None:
        self.database_lost()
        wait_out_database_outage(
            self.backoff, exc, doing=doing, once=self.once, stop=self.stop, extra={self.kind: self.name}
        )

    def _side_task_failed(self, name: str, exc: Exception) -> None:
        # No pause here: the next main step meets the same outage and waits it out.
        logger.warning(
            "%s not done: database unavailable",
            name.capitalize(),
            extra={self.kind: self.name, "error": database_error_reason(exc)},
        )
        self.database_lost()
        reset_connection_after_error()

    # --- side tasks -------------------------------------------------------------

    def run_side_tasks(self, *, idle: float = 0.0) -> float:
        """Run the side tasks that are due, given `idle` seconds before the next main work; return the seconds spent."""
        started = time.monotonic()
        for task in self.side_tasks:
            now = time.monotonic()
            remaining = max(0.0, idle - (now - started))
            if self.stop.is_set() or self.woken or not task.due(now=now, idle=remaining):
                continue
            task.last = now
            try:
                refresh_connection()
                more = task.step(idle=remaining)
            except DB_ERRORS as exc:
                self._side_task_failed(task.name, exc)
                continue
            if more:
                task.last = float("-inf")
        return time.monotonic() - started

    def run_side_tasks_to_the_end(self) -> None:
        """For a --once run: each side task once, and again while it says more is waiting."""
        for task in self.side_tasks:
            while not self.stop.is_set():
                task.last = time.monotonic()
                try:
                    refresh_connection()
                    if not task.step(idle=float("inf")):
                        break
                except DB_ERRORS as exc:
                    self._side_task_failed(task.name, exc)
                    break

    # --- sleeping ---------------------------------------------------------------

    def rest(self, seconds: float) -> None:
        """Until the next main work: side tasks that need an idle spell first, then sleep until a NOTIFY or `seconds`."""
        spent = self.run_side_tasks(idle=seconds)
        if not self.woken:
            self.listener.wait(seconds - spent)
        self.woken = False

    def woken_meanwhile(self) -> bool:
        """Whether a NOTIFY has come; a side task using an idle spell asks between its batches."""
        # A short look (1 ms) at the notification connection; a --once run never
        # sleeps, so it has nothing to look for.
        if not self.once:
            self.woken = self.woken or self.listener.wait(0.001)
        return self.woken

    def close(self) -> None:
        """The last heartbeat (stopped) and the notification connection."""
        self.heartbeat(stopped=True)
        self.listener.close()
