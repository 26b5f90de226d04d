"""What the long-running processes (run_scheduler, run_worker) share."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid

from django.db import DatabaseError, InterfaceError, OperationalError, connection

logger = logging.getLogger(__name__)

# Errors that mean "the database is away" (restart, killed backend), not a bug.
DB_ERRORS = (OperationalError, InterfaceError)


def process_name() -> str:
    """A name unique to this process: host, pid and a random suffix (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Backoff:
    """Growing pauses while the database is unreachable: 0.5 s doubling up to 10 s."""

    def __init__(self, first: float = 0.5, cap: float = 10.0) -> None:
        self.first, self.cap, self.current = first, cap, first

    def failed(self) -> float:
        delay, self.current = self.current, min(self.cap, self.current * 2)
        return delay

    def reset(self) -> None:
        self.current = self.first


def reset_connection_after_error() -> None:
    """Drop a broken connection; Django opens a fresh one on the next query."""
    try:
        connection.close()
    except DatabaseError:
        pass


def install_stop_signals(stop: threading.Event, *, what: str) -> None:
    """First SIGTERM/SIGINT: set `stop` (drain and exit 0). Second: exit at once."""

    def handle(signum, frame):
        if stop.is_set():
            logger.warning("Second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        logger.info("%s received: %s is finishing its work", signal.Signals(signum).name, what)
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
