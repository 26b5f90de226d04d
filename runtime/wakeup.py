"""Wake sleeping schedulers and workers through PostgreSQL LISTEN/NOTIFY.

NOTIFY is transactional: a notification sent inside a transaction is delivered
when (and only if) it commits, so a worker is never woken for rows it cannot see
yet. NOTIFY needs no session and goes wherever the work goes, through a
transaction pooler too; LISTEN does need one, so the listening connection goes
to DATABASE_LISTEN_URL when set (config/settings.py). While the listening
connection is lost, and behind a transaction pooler with no
DATABASE_LISTEN_URL, `Listener.wait` simply sleeps: polling is the fallback.

A listening connection left on a node that is no longer the primary (a
switchover that keeps the old node up, read-only, with its sessions open) fails
nothing: it just never hears a notification again, since they are sent on the
new primary. So the listener asks its server every few seconds whether it still
takes writes, and reconnects when not; with a multi-host URL
(target_session_attrs=read-write) the new connection finds the new primary.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from runtime.sql import send

logger = logging.getLogger(__name__)

# A new or rescheduled event may be due before the scheduler's next wake-up.
SCHEDULER_CHANNEL = "birthday_scheduler_wakeup"
# Deliveries were queued (or re-queued by an operator).
WORKER_CHANNEL = "birthday_delivery_queued"

# How often a blocked wait looks at its stop flag.
_STOP_CHECK_SECONDS = 0.25
# How often the listening connection asks its server whether it still takes writes
# (one round trip): after a switchover that leaves the old primary up, wake-ups
# are missed (and the processes poll every --interval) at most this long.
PRIMARY_CHECK_SECONDS = 5.0
# Options of Django's DATABASES entry that are Django's own, not libpq's.
_DJANGO_ONLY_OPTIONS = frozenset({"isolation_level", "server_side_binding", "assume_role", "pool"})


def notify(channel: str, payload: str = "") -> None:
    """Send a notification on the current connection (delivered at commit)."""
    # Through send, so that inside a runtime.sql.pipeline() it waits for nothing.
    send("SELECT pg_notify(%s, %s)", [channel, payload])


def listen_settings() -> dict[str, Any] | None:
    """Where to LISTEN (a DATABASES-style dict), or None when there is nowhere: poll."""
    listen: dict[str, Any] | None = settings.DATABASE_LISTEN
    if listen is not None:
        return listen
    if settings.DATABASE_TRANSACTION_POOLING:
        # A LISTEN through the pooler would hold for one transaction only: the
        # server connection then serves other clients, and its notifications
        # reach nobody who is waiting for them.
        return None
    return connection.settings_dict


class Listener:
    """A dedicated autocommit connection that LISTENs on one channel.

    Kept apart from Django's connection, which runs the work in transactions;
    a lost connection (PostgreSQL restarted) is reopened on the next wait.
    """

    def __init__(self, channel: str, stop: threading.Event) -> None:
        self.channel = channel
        self.stop = stop
        self.target = listen_settings()
        self.enabled = self.target is not None
        if not self.enabled:
            logger.info(
                "Transaction pooling without DATABASE_LISTEN_URL: no notifications, "
                "looking for new work every --interval",
                extra={"channel": channel},
            )
        self._conn: psycopg.Connection | None = None
        self._primary_check_due = 0.0

    def _connect(self) -> psycopg.Connection:
        settings_dict = self.target
        assert settings_dict is not None  # wait() connects only when enabled
        # libpq's own options from the URL's query, target_session_attrs above all:
        # with several hosts, it is what makes the connection skip a standby.
        options = {
            key: value
            for key, value in settings_dict.get("OPTIONS", {}).items()
            if key not in _DJANGO_ONLY_OPTIONS
        }
        options.setdefault("connect_timeout", 5)
        conn = psycopg.connect(
            dbname=settings_dict["NAME"],
            user=settings_dict["USER"] or None,
            password=settings_dict["PASSWORD"] or None,
            host=settings_dict["HOST"] or None,
            port=settings_dict["PORT"] or None,
            autocommit=True,
            **options,
        )
        conn.execute(f'LISTEN "{self.channel}"')
        self._primary_check_due = time.monotonic() + PRIMARY_CHECK_SECONDS
        return conn

    def _still_on_a_primary(self) -> bool:
        """False once the server takes no writes (a standby, a demoted primary): nothing will be heard there."""
        if time.monotonic() < self._primary_check_due:
            return True
        self._primary_check_due = time.monotonic() + PRIMARY_CHECK_SECONDS
        # In an autocommit session this is the next transaction's: on in recovery,
        # and on where default_transaction_read_only was turned on.
        assert self._conn is not None  # wait() connects first
        row = self._conn.execute("SHOW transaction_read_only").fetchone()
        assert row is not None  # SHOW answers one row
        return bool(row[0] != "on")

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` seconds; True if woken by a notification."""
        deadline = time.monotonic() + max(0.0, timeout)
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not self.enabled:
                self.stop.wait(min(remaining, _STOP_CHECK_SECONDS))
                continue
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                if not self._still_on_a_primary():
                    logger.warning(
                        "Notification connection is on a server that takes no writes (a standby or a demoted "
                        "primary); reconnecting, polling meanwhile",
                        extra={"channel": self.channel},
                    )
                    self.close()
                    self.stop.wait(min(max(remaining, 0), 1.0))
                    continue
                woken = any(
                    True
                    for _ in self._conn.notifies(timeout=min(remaining, _STOP_CHECK_SECONDS), stop_after=1)
                )
                if woken:
                    # Several notifications may be queued; one wake-up serves them
                    # all. (Drained only after the first generator has finished:
                    # it holds the connection's lock while it runs.)
                    for _ in self._conn.notifies(timeout=0):
                        pass
                    return True
            except psycopg.Error as exc:
                logger.warning(
                    "Notification connection lost; polling until it is back",
                    extra={"channel": self.channel, "error": str(exc).strip()},
                )
                self.close()
                self.stop.wait(min(max(remaining, 0), 1.0))
        return False

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None
