"""Where a process LISTENs for wake-ups (runtime.wakeup), with and without a transaction pooler."""

import logging
import threading
import time

import pytest
from django.db import connection, transaction

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
def test_behind_a_transaction_pooler_without_a_listen_url_the_listener_polls_and_says_so(settings, listener, caplog):
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
def test_behind_a_transaction_pooler_the_listen_url_receives_what_the_work_connection_notifies(settings, listener):
    settings.DATABASE_TRANSACTION_POOLING = True
    settings.DATABASE_LISTEN = direct_settings()
    woken = listener()
    assert woken.wait(0.01) is False  # connected and listening before the NOTIFY

    with transaction.atomic():
        notify(CHANNEL)

    assert woken.target is settings.DATABASE_LISTEN
    assert woken.wait(5) is True
