"""The worker's own judgement of an outage it saw no error for (delivery.worker.Worker._held_up)."""

import time

import pytest

from delivery.worker import Worker

pytestmark = pytest.mark.django_db


@pytest.fixture
def worker(delivery_settings):
    made = Worker(once=True)
    yield made
    made.loop.close()


def test_a_step_held_past_a_lease_renewal_without_an_error_is_taken_for_an_outage(worker):
    # Given a worker whose last step began longer ago than its lease renewal period
    worker.progress_at = time.monotonic() - worker.renew_leases.every - 1

    # When it moves on to the next step
    worker._held_up()

    # Then it takes over no lease until the grace after an outage has passed
    assert worker.recovering
    assert worker.take_over_after > time.monotonic() + worker.timeout


def test_a_step_shorter_than_a_lease_renewal_changes_nothing(worker):
    worker.progress_at = time.monotonic()

    worker._held_up()

    assert not worker.recovering
    assert worker.take_over_after <= time.monotonic()
