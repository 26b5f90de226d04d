"""Telling an outage from a bug (runtime.database): the decision, as a table."""

import psycopg
import pytest
from django.db import IntegrityError, InternalError, OperationalError

from runtime.database import is_database_outage, is_server_read_only


def wrapped(django_error: type[Exception], cause: Exception) -> Exception:
    """A Django error raised from psycopg's, as Django's DatabaseErrorWrapper raises it."""
    error = django_error(*cause.args)
    error.__cause__ = cause
    return error


READ_ONLY = psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction")


@pytest.mark.parametrize(
    "error, outage, read_only",
    [
        (READ_ONLY, True, True),
        (psycopg.errors.ReadOnlySqlTransaction("cannot execute LISTEN during recovery"), True, True),
        (wrapped(InternalError, READ_ONLY), True, True),
        (psycopg.errors.AdminShutdown("terminating connection due to administrator command"), True, False),
        (
            psycopg.errors.CrashShutdown("terminating connection because of crash of another server process"),
            True,
            False,
        ),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True, False),
        (psycopg.OperationalError("connection failed: session is read-only"), True, False),
        (
            wrapped(OperationalError, psycopg.OperationalError("server closed the connection unexpectedly")),
            True,
            False,
        ),
        (psycopg.errors.FeatureNotSupported("cannot use serializable mode in a hot standby"), False, False),
        (psycopg.InternalError("out of shared memory"), False, False),
        (wrapped(IntegrityError, psycopg.errors.UniqueViolation("duplicate key value")), False, False),
        (ValueError("not a database error"), False, False),
    ],
)
def test_an_error_is_an_outage_when_the_database_is_away_or_takes_no_writes(error, outage, read_only):
    assert is_database_outage(error) is outage
    assert is_server_read_only(error) is read_only
