"""The PostgreSQL backend (runtime.postgresql): any error that leaves the connection closed is an outage."""

from types import SimpleNamespace

import psycopg
import pytest
from django.db import IntegrityError, InternalError, OperationalError, ProgrammingError

from runtime.postgresql.base import LostConnectionErrorWrapper


def raised_through(error: Exception, *, closed: bool) -> Exception:
    backend = SimpleNamespace(Database=psycopg, connection=SimpleNamespace(closed=closed), errors_occurred=False)
    with pytest.raises(Exception) as raised, LostConnectionErrorWrapper(backend):
        raise error
    return raised.value


@pytest.mark.parametrize(
    "error, closed, expected",
    [
        (psycopg.InternalError("received 2 results from command 'BEGIN'"), True, OperationalError),
        (psycopg.ProgrammingError("COPY cannot be mixed with other operations"), True, OperationalError),
        (psycopg.OperationalError("server closed the connection unexpectedly"), True, OperationalError),
        (psycopg.ProgrammingError('relation "nowhere" does not exist'), False, ProgrammingError),
        (psycopg.InternalError("out of shared memory"), False, InternalError),
        (psycopg.IntegrityError("duplicate key value"), False, IntegrityError),
    ],
)
def test_a_database_error_is_an_outage_when_it_leaves_the_connection_closed(error, closed, expected):
    raised = raised_through(error, closed=closed)

    assert type(raised) is expected
    assert str(error) in str(raised)


def test_an_error_on_a_connection_never_opened_is_passed_on_as_it_is():
    backend = SimpleNamespace(Database=psycopg, connection=None, errors_occurred=False)
    with pytest.raises(ProgrammingError), LostConnectionErrorWrapper(backend):
        raise psycopg.ProgrammingError("no connection yet")
