"""Naming a long-running process and stopping it cleanly on signals."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from types import FrameType

logger = logging.getLogger(__name__)


def process_name() -> str:
    """A name unique to this process: host, pid and a random suffix (pids are reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def install_stop_signals(stop: threading.Event, *, what: str) -> Callable[[], None]:
    """First SIGTERM/SIGINT: set `stop` (drain and exit 0). Second: exit at once.

    Returns a function that puts the previous handlers back.
    """

    def handle(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            logger.warning("Second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        logger.info("%s received: %s is finishing its work", signal.Signals(signum).name, what)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore
