"""Where a process LISTENs for wake-ups (runtime.wakeup): with and without a transaction pooler, across a failover."""

import logging
import socket
import threading
import time

import pytest
from django.db import connection, transaction

from runtime import wakeup
from runtime.wakeup import Listener, notify

CHANNEL = "test_wakeup"


@pytest.fixture
def listener():
    made = []

    def make() -> Listener:
        made.append(Listener(CHANNEL, threading.Event()))
        return made[-1]

    yield make
    for each in made:
        each.close()


def direct_settings() -> dict:
    """The test database's server as a DATABASE_LISTEN_URL would give it."""
    return {key: connection.settings_dict[key] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT")}


@pytest.mark.django_db
def test_without_a_pooler_or_listen_url_the_listener_uses_the_database_server(settings, listener):
    settings.DATABASE_TRANSACTION_POOLING = False
    settings.DATABASE_LISTEN = None

    assert listener().target is connection.settings_dict


@pytest.mark.django_db
def test_behind_a_transaction_pooler_without_a_listen_url_the_listener_polls_and_says_so(
    settings, listener, caplog
):
    settings.DATABASE_TRANSACTION_POOLING = True
    settings.DATABASE_LISTEN = None

    with caplog.at_level(logging.INFO, logger="runtime.wakeup"):
        polling = listener()
    started = time.monotonic()
    woken = polling.wait(0.3)

    assert not polling.enabled
    assert woken is False and time.monotonic() - started >= 0.3
    assert polling._conn is None  # never connected anywhere
    assert "without DATABASE_LISTEN_URL" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_behind_a_transaction_pooler_the_listen_url_receives_what_the_work_connection_notifies(
    settings, listener
):
    settings.DATABASE_TRANSACTION_POOLING = True
    settings.DATABASE_LISTEN = direct_settings()
    woken = listener()
    assert woken.wait(0.01) is False  # connected and listening before the NOTIFY

    with transaction.atomic():
        notify(CHANNEL)

    assert woken.target is settings.DATABASE_LISTEN
    assert woken.wait(5) is True


@pytest.mark.django_db(transaction=True)
def test_the_listener_follows_a_multi_host_url_to_the_server_that_takes_writes(settings, listener):
    # Given a DATABASE_LISTEN_URL naming first a host where nothing listens, then the real server
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    server = direct_settings()
    settings.DATABASE_TRANSACTION_POOLING = False
    settings.DATABASE_LISTEN = {
        **server,
        "HOST": f"127.0.0.1,{server['HOST'] or '127.0.0.1'}",
        "PORT": f"{closed_port},{server['PORT'] or 5432}",
        "OPTIONS": {"target_session_attrs": "read-write"},
    }
    woken = listener()
    assert woken.wait(0.01) is False  # connected and listening before the NOTIFY

    with transaction.atomic():
        notify(CHANNEL)

    assert woken.wait(5) is True
    assert woken._conn.info.port == int(server["PORT"] or 5432)


@pytest.mark.django_db
def test_a_listener_on_a_server_that_takes_no_writes_reconnects_and_says_so(
    settings, listener, caplog, monkeypatch
):
    # Given a listening connection to a server whose sessions are read-only, as a demoted
    # primary's are: LISTEN still works there, but nothing will ever be notified on it
    monkeypatch.setattr(wakeup, "PRIMARY_CHECK_SECONDS", 0.0)
    settings.DATABASE_TRANSACTION_POOLING = False
    settings.DATABASE_LISTEN = {
        **direct_settings(),
        "OPTIONS": {"options": "-c default_transaction_read_only=on"},
    }
    stale = listener()

    # When it waits
    with caplog.at_level(logging.WARNING, logger="runtime.wakeup"):
        assert stale.wait(0.5) is False

    # Then it found out, dropped that connection and tried again
    assert "takes no writes" in caplog.text
    assert stale._conn is None


@pytest.mark.django_db
def test_a_listener_on_the_primary_keeps_its_connection_across_checks(settings, listener, monkeypatch):
    monkeypatch.setattr(wakeup, "PRIMARY_CHECK_SECONDS", 0.0)
    settings.DATABASE_TRANSACTION_POOLING = False
    settings.DATABASE_LISTEN = direct_settings()
    kept = listener()
    kept.wait(0.01)
    first = kept._conn

    assert kept.wait(0.6) is False

    assert kept._conn is first and not first.closed
