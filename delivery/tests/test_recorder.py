"""The worker's answers written down on a thread of their own (delivery.recorder.Recorder)."""

import threading
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from delivery import recorder as recorder_module
from delivery.models import AttemptOutcome, Delivery, DeliveryStatus
from delivery.recorder import Recorder
from delivery.scheduler import Scheduler
from delivery.services.leases import deliveries_claim
from delivery.tests.conftest import create_due_users
from delivery.transport import SendResult
from delivery.worker import Worker
from scheduling.models import Event, EventStatus

LEASE = timedelta(seconds=30)


def answered(claimed) -> list[SendResult]:
    now = timezone.now()
    return [
        SendResult(
            delivery=d,
            outcome=AttemptOutcome.DELIVERED,
            started_at=now,
            finished_at=now,
            duration_ms=1,
            status_code=200,
        )
        for d in claimed
    ]


@pytest.mark.django_db(transaction=True)
def test_a_batch_is_written_on_the_recorders_thread_while_the_caller_goes_on(delivery_settings, monkeypatch):
    # Given three claimed deliveries answered 200, and a write that waits until the caller has gone on
    create_due_users(3)
    Scheduler(once=True).run()
    claimed = deliveries_claim(worker="w1", limit=10, lease=LEASE)
    caller_went_on = threading.Event()
    written_on = []
    record = recorder_module.deliveries_record

    def slow_record(**kwargs):
        assert caller_went_on.wait(10)
        written_on.append(threading.current_thread())
        return record(**kwargs)

    monkeypatch.setattr(recorder_module, "deliveries_record", slow_record)
    recorder = Recorder(worker="w1")
    try:
        # When the batch is handed over
        recorder.submit(answered(claimed), healthy=[])

        # Then the caller has it back at once, the batch still its own (its leases are renewed with the rest)
        assert recorder.running
        assert set(recorder.held_ids()) == {d.id for d in claimed}
        assert recorder.collect(wait=False) is None
        caller_went_on.set()
        # and the summary comes once the recorder's thread wrote the batch
        results, summary = recorder.collect(wait=True)
    finally:
        recorder.close()
    assert written_on and written_on[0] is not threading.current_thread()
    assert summary.delivered == 3 and len(results) == 3
    assert not recorder.busy and recorder.held_ids() == []
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == 3


@pytest.mark.django_db
def test_a_batch_the_database_refused_is_held_again_by_the_worker_to_be_written_once_it_is_back(
    delivery_settings, monkeypatch
):
    # Given a worker holding three answers, and a database that refuses their write
    create_due_users(3)
    Scheduler(once=True).run()
    worker = Worker(once=True)
    worker.lanes.refresh_if_due()
    claimed = deliveries_claim(worker=worker.name, limit=10, lease=LEASE)
    try:
        worker.sender.answers = answered(claimed)

        def refused(**kwargs):
            raise OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(recorder_module, "deliveries_record", refused)

        # When the worker records them
        with pytest.raises(OperationalError):
            worker._record_if_ready(force=True)

        # Then they are its answers again, nothing half written, and the next write records them
        assert [r.delivery.id for r in worker.sender.answers] == [d.id for d in claimed]
        assert not worker.recorder.busy
        assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.SENDING}
        monkeypatch.undo()
        worker._record_if_ready(force=True)
    finally:
        worker.recorder.close()
        worker.sender.loop.close()
    assert worker.sender.answers == []
    assert worker.counted["delivered"] == 3
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
