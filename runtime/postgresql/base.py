"""Django's PostgreSQL backend, telling an outage from a bug.

Two kinds of error are the database going away, and are raised as
OperationalError, which the long-running processes wait out (runtime.database):

* Any database error that leaves the connection closed. A server connection
  lost under a transaction (PostgreSQL restarting, a backend terminated)
  reaches the client through PgBouncer as the pooler's error followed by the
  connection's end. psycopg, reading an answer that does not fit what it sent,
  reports it as a misuse: "received 2 results from command 'BEGIN'"
  (InternalError), "COPY cannot be mixed with other operations"
  (ProgrammingError). Django would pass those on as such, and the processes
  would stop on them as on a bug.
* An error whose SQLSTATE says the server cannot do the work now
  (runtime.database.OUTAGE_SQLSTATES): above all "cannot execute UPDATE in a
  read-only transaction" from a node that is no longer the primary, which
  psycopg files under InternalError. The connection then still works for
  reads, and Django would keep it (its health check is a SELECT 1): it is
  marked unusable instead, so it is closed between requests or units of work,
  and the next one finds the new primary.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import psycopg
from django.db.backends.postgresql import base
from django.db.utils import DatabaseErrorWrapper
from django.utils.functional import cached_property

from runtime.database import is_database_outage, is_server_read_only

_OUTAGE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


class LostConnectionErrorWrapper(DatabaseErrorWrapper):
    # Set by DatabaseErrorWrapper.__init__; django-stubs leave the attribute out.
    wrapper: DatabaseWrapper

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # (A with block's exception type always comes with its value.)
        if exc_type is None or exc_value is None or not issubclass(exc_type, psycopg.DatabaseError):
            return super().__exit__(exc_type, exc_value, traceback)
        if is_server_read_only(exc_value):
            self.wrapper.server_read_only = True
        if not issubclass(exc_type, _OUTAGE_ERRORS):
            raw = self.wrapper.connection
            if raw is not None and raw.closed:
                outage = psycopg.OperationalError(f"connection lost: {exc_value}")
            elif is_database_outage(exc_value):
                outage = psycopg.OperationalError(f"server cannot take writes now: {exc_value}")
            else:
                return super().__exit__(exc_type, exc_value, traceback)
            outage.__cause__ = exc_value
            return super().__exit__(psycopg.OperationalError, outage, traceback)
        return super().__exit__(exc_type, exc_value, traceback)


class DatabaseWrapper(base.DatabaseWrapper):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Set when a statement met a server that takes no writes (see the module's docstring).
        self.server_read_only = False

    @cached_property
    def wrap_database_errors(self) -> LostConnectionErrorWrapper:
        return LostConnectionErrorWrapper(self)

    def connect(self) -> None:
        self.server_read_only = False
        super().connect()

    def is_usable(self) -> bool:
        return not self.server_read_only and super().is_usable()
