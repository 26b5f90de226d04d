"""The database side of a long-running process: telling an outage from a bug, waiting it out."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections, connection

logger = logging.getLogger(__name__)

# Errors that mean "the database is away" (restart, killed backend, failover), not a bug.
# A server that cannot take writes answers with errors of other classes (see
# OUTAGE_SQLSTATES); the backend (runtime/postgresql/base.py) raises those as
# OperationalError too, so that `except DB_ERRORS` is the whole decision for Django's
# connection.
DB_ERRORS = (OperationalError, InterfaceError)

# SQLSTATEs that mean "this server cannot do this process's work now; another one
# will": an outage, whatever class of error psycopg files them under.
# 25006 read_only_sql_transaction is how PostgreSQL refuses a write (an UPDATE, a
# SELECT FOR UPDATE, nextval, LISTEN, NOTIFY) on a hot standby, "cannot execute
# LISTEN during recovery" included, and on a primary demoted while its sessions
# stay open (default_transaction_read_only, as a switchover that keeps the old
# node up leaves it). psycopg files it under InternalError, which Django would
# pass on as a bug: the processes used to exit on it.
# 57P01 admin_shutdown, 57P02 crash_shutdown and 57P03 cannot_connect_now (the
# server is stopping, crashing, starting or still recovering) are OperationalError
# already; they are here so that the list is the whole answer. A standby's other
# refusal, 0A000 "cannot use serializable mode in a hot standby", is not here: the
# product never asks for SERIALIZABLE, and 0A000 otherwise means a real misuse.
OUTAGE_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03"})
# Of those, the ones from a server that is up but takes no writes: a connection
# that met one is dropped, so that the next one, through a multi-host DATABASE_URL
# with target_session_attrs=read-write, finds the primary.
SERVER_READ_ONLY_SQLSTATES = frozenset({"25006"})

_AWAY = (OperationalError, InterfaceError, psycopg.OperationalError, psycopg.InterfaceError)


def _error_and_causes(exc: BaseException | None) -> Iterator[BaseException]:
    """The error and what it was raised from: Django's errors carry psycopg's as their cause."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__


def is_database_outage(exc: BaseException) -> bool:
    """Whether `exc` means the database is away or cannot take writes now (wait, reconnect), not a bug.

    The same answer for psycopg's error and for Django's wrapping of it.
    """
    return isinstance(exc, _AWAY) or any(
        getattr(error, "sqlstate", None) in OUTAGE_SQLSTATES for error in _error_and_causes(exc)
    )


def is_server_read_only(exc: BaseException) -> bool:
    """Whether `exc` came from a server that is up but cannot take writes (a standby, a demoted primary)."""
    return any(
        getattr(error, "sqlstate", None) in SERVER_READ_ONLY_SQLSTATES for error in _error_and_causes(exc)
    )


class Backoff:
    """Growing pauses while the database is unreachable: 0.5 s doubling up to 2 s.

    The cap is short on purpose: after an outage every worker must be back
    within a second or two, to record what it sent and renew its leases before
    anyone may take them over (see delivery.worker.loop's takeover grace). A failed
    connection attempt costs one TCP round trip, so trying every 2 s is cheap.
    """

    def __init__(self, first: float = 0.5, cap: float = 2.0) -> None:
        self.first, self.cap, self.current = first, cap, first
        self.failures = 0  # in a row

    def failed(self) -> float:
        self.failures += 1
        delay, self.current = self.current, min(self.cap, self.current * 2)
        return delay

    def reset(self) -> None:
        self.current = self.first
        self.failures = 0


class DatabaseUnavailable(RuntimeError):
    """A --once run could not reach the database after several tries."""


# A --once run (cron, tests) gives up after this many failures in a row instead of
# waiting forever; a long-running process keeps trying.
ONCE_MAX_DB_FAILURES = 5


def refresh_connection() -> None:
    """Between units of work: drop the connection if it is broken or past its age.

    Skipped inside an atomic block, where Django would see autocommit off and
    close the connection under the open transaction. The loops never run inside
    one in production; tests drive them inside their test transaction.
    """
    if not connection.in_atomic_block:
        close_old_connections()


def database_error_reason(exc: Exception) -> str:
    """The first line of a database error, for one log line or message (its name if it has no text)."""
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def wait_out_database_outage(
    backoff: Backoff, exc: Exception, *, doing: str, once: bool, stop: threading.Event, extra: dict[str, Any]
) -> None:
    """The database is away: log, drop the connection, and pause before the next try.

    A --once run gives up (DatabaseUnavailable) after ONCE_MAX_DB_FAILURES in a
    row; a long-running process keeps trying, pausing longer each time.
    """
    delay = backoff.failed()
    if once and backoff.failures >= ONCE_MAX_DB_FAILURES:
        raise DatabaseUnavailable(f"Database unavailable during {doing}: {exc}") from exc
    logger.error(
        "Database unavailable during %s; retrying in %.1f s",
        doing,
        delay,
        extra={**extra, "error": database_error_reason(exc)},
    )
    reset_connection_after_error()
    stop.wait(delay)


def reset_connection_after_error() -> None:
    """Drop a broken connection; Django opens a fresh one on the next query."""
    if connection.in_atomic_block:
        return  # the enclosing transaction (a test's) owns the connection
    try:
        connection.close()
    except DatabaseError:
        pass
