"""The PostgreSQL backend (runtime.postgresql): an error that leaves the connection closed, or comes from a server
that takes no writes, is an outage."""

import socket
from types import SimpleNamespace

import environ
import psycopg
import pytest
from django.db import (
    DEFAULT_DB_ALIAS,
    IntegrityError,
    InternalError,
    OperationalError,
    ProgrammingError,
    connections,
)

from runtime.postgresql.base import LostConnectionErrorWrapper


def raised_through(error: Exception, *, closed: bool) -> Exception:
    backend = SimpleNamespace(
        Database=psycopg, connection=SimpleNamespace(closed=closed), errors_occurred=False
    )
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


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute LISTEN during recovery"),
    ],
)
def test_a_server_that_takes_no_writes_is_an_outage_and_its_connection_is_not_kept(error):
    backend = SimpleNamespace(
        Database=psycopg, connection=SimpleNamespace(closed=False), errors_occurred=False
    )
    with pytest.raises(OperationalError) as raised, LostConnectionErrorWrapper(backend):
        raise error

    assert str(error) in str(raised.value)
    assert raised.value.__cause__.__cause__ is error  # the SQLSTATE stays readable
    assert backend.server_read_only is True


@pytest.mark.django_db
def test_a_real_write_refused_as_read_only_is_raised_as_an_outage_and_the_connection_dropped_after(
    read_only_connection,
):
    # Given a connection whose server takes no writes, as a demoted primary's sessions do
    with read_only_connection.cursor() as cursor:
        cursor.execute("SELECT 1")

    # When a write is refused
    with (
        pytest.raises(OperationalError, match="read-only transaction"),
        read_only_connection.cursor() as cursor,
    ):
        cursor.execute("CREATE TABLE never_created (id int)")

    # Then Django's check between units of work closes the connection, although SELECT 1 still works there
    assert read_only_connection.connection.execute("SELECT 1").fetchone() == (1,)
    read_only_connection.close_if_unusable_or_obsolete()
    assert read_only_connection.connection is None
    # ...and the next connection starts afresh
    with read_only_connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert read_only_connection.server_read_only is False


@pytest.fixture
def read_only_connection():
    default = connections["default"]
    options = {**default.settings_dict["OPTIONS"], "options": "-c default_transaction_read_only=on"}
    # A second connection to the same database under the default alias: contrib.postgres looks
    # its type OIDs up through the alias of every new connection.
    wrapper = type(default)({**default.settings_dict, "OPTIONS": options}, alias=DEFAULT_DB_ALIAS)
    try:
        yield wrapper
    finally:
        wrapper.close()


@pytest.mark.django_db
def test_a_multi_host_database_url_connects_to_the_host_that_takes_writes():
    # Given a DATABASE_URL naming first a host where nothing listens, then the test's server,
    # read as config/settings.py reads it
    default = connections["default"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    host, port = default.settings_dict["HOST"] or "127.0.0.1", default.settings_dict["PORT"] or "5432"
    parsed = environ.Env.db_url_config(
        f"postgres://{default.settings_dict['USER']}@127.0.0.1:{closed_port},{host}:{port}"
        f"/{default.settings_dict['NAME']}?target_session_attrs=read-write"
    )
    assert (parsed["HOST"], parsed["PORT"]) == (f"127.0.0.1,{host}", f"{closed_port},{port}")
    # A second connection under the default alias: contrib.postgres looks its type OIDs up through it.
    multi_host = type(default)(
        {**default.settings_dict, **parsed, "ENGINE": default.settings_dict["ENGINE"]}, alias=DEFAULT_DB_ALIAS
    )
    try:
        # When it connects, then it is on the server that answered, in a session that takes writes
        with multi_host.cursor() as cursor:
            cursor.execute("SHOW transaction_read_only")
            assert cursor.fetchone() == ("off",)
        assert multi_host.connection.info.port == int(port)
    finally:
        multi_host.close()
