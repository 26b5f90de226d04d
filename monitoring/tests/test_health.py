"""The load balancer's probes: liveness touches nothing, readiness checks the database and its migrations."""

import socket

import pytest
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections
from django.db.migrations import Migration
from django.db.migrations.executor import MigrationExecutor

from monitoring.selectors import Readiness, readiness


def test_liveness_answers_without_the_database(client):
    # No django_db mark: any query, even a connection attempt, fails this test.
    response = client.get("/health/live")

    assert response.status_code == 200
    assert response.json() == {"status": "alive"}
    assert "no-cache" in response["Cache-Control"]


def test_probes_only_read(client):
    assert client.post("/health/live").status_code == 405


@pytest.mark.django_db
def test_readiness_is_200_when_the_database_answers_and_is_migrated(client):
    response = client.get("/health/ready")

    assert response.status_code == 200
    assert response.json() == {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


@pytest.mark.django_db
def test_readiness_is_503_when_the_database_is_unreachable_without_saying_where_it_is(client, monkeypatch):
    def refuse():
        raise OperationalError('connection to server at "10.9.8.7", port 5432 failed: Connection refused')

    monkeypatch.setattr(connection, "ensure_connection", refuse)

    response = client.get("/health/ready")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": "database unreachable",
        "checks": {"database": "unreachable", "migrations": "unknown"},
    }
    assert b"10.9.8.7" not in response.content


@pytest.mark.django_db
def test_readiness_sees_a_database_that_refuses_connections():
    with socket.socket() as probe:  # a port nobody listens on once this closes
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    default = connections["default"]
    dead = type(default)({**default.settings_dict, "HOST": "127.0.0.1", "PORT": closed_port}, alias="dead")
    try:
        assert readiness(connection=dead) == Readiness(database=False)
    finally:
        dead.close()


@pytest.mark.django_db
def test_readiness_is_503_while_the_database_takes_no_writes(client):
    # Given a database server whose new transactions are read-only, as a primary's
    # during a switchover (LOCAL: it ends with the test's transaction)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL default_transaction_read_only = on")

    response = client.get("/health/ready")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": "database takes no writes (a standby, or a primary being switched over)",
        "checks": {"database": "read-only", "migrations": "ok"},
    }


@pytest.mark.django_db
def test_readiness_drops_a_connection_on_a_server_that_takes_no_writes_so_the_next_finds_the_primary():
    default = connections["default"]
    options = {**default.settings_dict["OPTIONS"], "options": "-c default_transaction_read_only=on"}
    # A second connection to the same database under the default alias: contrib.postgres looks
    # its type OIDs up through the alias of every new connection.
    read_only = type(default)({**default.settings_dict, "OPTIONS": options}, alias=DEFAULT_DB_ALIAS)
    try:
        assert readiness(connection=read_only) == Readiness(database=True, writable=False)
        assert read_only.connection is None
    finally:
        read_only.close()


@pytest.mark.django_db
def test_readiness_is_503_with_the_migrations_not_applied(client, monkeypatch):
    pending = Migration("0099_not_yet", "delivery")
    monkeypatch.setattr(MigrationExecutor, "migration_plan", lambda self, targets: [(pending, False)])

    response = client.get("/health/ready")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reason": "1 migration(s) not applied: run manage.py migrate",
        "checks": {"database": "ok", "migrations": "unapplied"},
        "unapplied_migrations": ["delivery.0099_not_yet"],
    }


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/health/live", "/health/ready", "/metrics"])
def test_probes_and_scrapes_are_answered_over_plain_http_when_https_is_enforced(client, settings, path):
    settings.SECURE_SSL_REDIRECT = True

    assert client.get(path).status_code == 200
    assert client.get("/api/v1/users/").status_code == 301  # everything else is redirected
