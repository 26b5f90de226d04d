"""The worker's own judgement of an outage it saw no error for (delivery.worker.loop.Worker._held_up)."""

import logging
import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from delivery.models import Endpoint, EndpointState
from delivery.states import endpoints as endpoints_service
from delivery.tests.pipeline import endpoint_columns
from delivery.worker import claimer
from delivery.worker.loop import Worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def worker(delivery_settings):
    made = Worker(once=True)
    yield made
    made.sender.loop.close()


def test_a_step_held_past_a_lease_renewal_without_an_error_is_taken_for_an_outage(worker):
    # Given a worker whose last step began longer ago than its lease renewal period
    worker.grace.stepped_mono = time.monotonic() - worker.renew_leases.every - 1

    # When it moves on to the next step
    worker._held_up()

    # Then it keeps what it holds first, and takes over no lease until the grace after an outage has passed
    assert worker.grace.recovery_due
    assert not worker.grace.may_take_over(time.monotonic() + worker.timeout)


def test_a_step_shorter_than_a_lease_renewal_changes_nothing(worker):
    worker.grace.stepped_mono = time.monotonic()

    worker._held_up()

    assert not worker.grace.recovery_due
    assert worker.grace.may_take_over(time.monotonic())


def test_a_database_error_while_giving_back_an_unused_probe_is_an_outage_not_a_crash(
    delivery_settings, monkeypatch, caplog
):
    # Given a failing endpoint whose probe is due, with nothing queued to probe it with
    now = timezone.now()
    Endpoint.objects.create(
        **endpoint_columns(delivery_settings.WEBHOOK_URL),
        state=EndpointState.FAILING,
        consecutive_failures=5,
        failing_since=now - timedelta(minutes=1),
        next_probe_at=now - timedelta(seconds=1),
        probe_interval=timedelta(seconds=5),
    )
    # and a database that goes away just when the worker gives the probe back
    calls = []

    def give_back(**kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return endpoints_service.endpoint_return_probe(**kwargs)

    monkeypatch.setattr(claimer, "endpoint_return_probe", give_back)

    # When a worker runs through it
    with caplog.at_level(logging.ERROR, logger="runtime.database"):
        exit_code = Worker(once=True).run()

    # Then it waited the outage out like any other and finished its run
    assert calls
    assert exit_code == 0
    assert "Database unavailable" in caplog.text
