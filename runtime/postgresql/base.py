"""Django's PostgreSQL backend, telling a lost connection from a misused one.

A server connection lost under a transaction (PostgreSQL restarting, a backend
terminated) reaches the client through PgBouncer as the pooler's error followed
by the connection's end. psycopg, reading an answer that does not fit what it
sent, reports it as a misuse: "received 2 results from command 'BEGIN'"
(InternalError), "COPY cannot be mixed with other operations"
(ProgrammingError). Django would pass those on as such, and the long-running
processes, which wait out OperationalError (runtime.database), would stop on
them as on a bug. Any database error that leaves the connection closed is the
database going away, and is raised as OperationalError.
"""

from __future__ import annotations

import psycopg
from django.db.backends.postgresql import base
from django.db.utils import DatabaseErrorWrapper
from django.utils.functional import cached_property

_OUTAGE_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


class LostConnectionErrorWrapper(DatabaseErrorWrapper):
    def __exit__(self, exc_type, exc_value, traceback):
        raw = self.wrapper.connection
        if (
            exc_type is not None
            and issubclass(exc_type, psycopg.DatabaseError)
            and not issubclass(exc_type, _OUTAGE_ERRORS)
            and raw is not None
            and raw.closed
        ):
            lost = psycopg.OperationalError(f"connection lost: {exc_value}")
            lost.__cause__ = exc_value
            return super().__exit__(psycopg.OperationalError, lost, traceback)
        return super().__exit__(exc_type, exc_value, traceback)


class DatabaseWrapper(base.DatabaseWrapper):
    @cached_property
    def wrap_database_errors(self):
        return LostConnectionErrorWrapper(self)
