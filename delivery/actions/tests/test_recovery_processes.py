"""A destination's recovery for real: worker processes queue the deliveries again in batches, a real receiver
gets each of them again under its key, and a worker killed mid-recovery leaves nothing for the next to miss."""

import signal
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.actions.recovery import recovery_create
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import (
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Recovery,
    RecoveryStatus,
)
from delivery.tests.pipeline import (
    ScriptedSink,
    create_due_users,
    eventually,
    process_env,
    start_process,
    stop_all,
    wait_until,
)
from delivery.worker.loop import Worker
from devtools.sink import Reply
from scheduling.models import Event, EventStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

DELIVERED = DeliveryStatus.DELIVERED


def delivered_once(count: int, *sinks_by_name) -> dict[str, list[Delivery]]:
    """`count` occurrences delivered to every destination, in this process; each destination's deliveries by id."""
    create_due_users(count)
    Scheduler(once=True).run()
    Worker(concurrency=8, once=True).run()
    assert Delivery.objects.filter(status=DELIVERED).count() == count * len(sinks_by_name)
    return {
        name: list(Delivery.objects.filter(destination__name=name).order_by("id"))
        for name, _ in sinks_by_name
    }


def ended_at(deliveries, at) -> None:
    """When the receiver accepted them, as the history shows it (the window is on that time)."""
    Delivery.objects.filter(pk__in=[d.pk for d in deliveries]).update(updated_at=at, delivered_at=at)


def test_recovering_delivered_between_two_instants_sends_exactly_those_again_in_batches_under_their_keys(
    delivery_settings, tmp_path
):
    # given two receivers that each got 60 occurrences, crm's over three spells of yesterday and today
    delivery_settings.WEBHOOK_URL = ""
    with ScriptedSink() as crm_sink, ScriptedSink() as hr_sink:
        crm = destination_create(
            settings=DestinationSettings(name="crm", url=crm_sink.url), operator="ops"
        ).destination
        destination_create(settings=DestinationSettings(name="hr", url=hr_sink.url), operator="ops")
        history = delivered_once(60, ("crm", crm_sink), ("hr", hr_sink))
        yesterday_8 = (timezone.now() - timedelta(days=1)).replace(hour=8, minute=0, second=0, microsecond=0)
        ended_at(history["crm"][:20], yesterday_8 - timedelta(minutes=1))  # before the window
        ended_at(history["crm"][20:50], yesterday_8 + timedelta(hours=3))  # inside
        ended_at(history["crm"][50:], yesterday_8 + timedelta(hours=26))  # after it
        ended_at(history["hr"], yesterday_8 + timedelta(hours=3))  # inside, but another destination's
        inside = {d.idempotency_key for d in history["crm"][20:50]}
        before = Counter(crm_sink.keys()), Counter(hr_sink.keys())
        recovery = recovery_create(
            destination=crm,
            operator="ops",
            states=[DELIVERED],
            since=yesterday_8,
            until=yesterday_8 + timedelta(hours=26),
        )
        assert recovery.total == 30

        # when a worker process carries it out, 7 deliveries a batch
        env = process_env(delivery_settings, DELIVERY_RECOVERY_BATCH=7)
        worker = start_process(["run_worker"], env, tmp_path / "worker.log")
        try:
            wait_until(
                lambda: Recovery.objects.get().status == RecoveryStatus.FINISHED, 60, "the recovery to end"
            )
            wait_until(
                lambda: not Delivery.objects.exclude(status=DELIVERED).exists()
                and not Event.objects.filter(status=EventStatus.PROCESSING).exists(),
                60,
                "the resends",
            )
        finally:
            exit_codes = stop_all([worker])

        # then exactly those 30 arrived again, each under its key, and progress ended at the total
        assert exit_codes == [0]
        again = Counter(crm_sink.keys()) - before[0]
        assert set(again) == inside and set(again.values()) == {1}
        assert Counter(hr_sink.keys()) == before[1]
        recovery.refresh_from_db()
        assert (recovery.done, recovery.skipped, recovery.total) == (30, 0, 30)
        assert recovery.batches == 5  # 7 + 7 + 7 + 7 + 2
        assert Event.objects.filter(status=EventStatus.COMPLETED).count() == 60


def test_a_worker_killed_mid_recovery_leaves_the_rest_to_another_and_nothing_is_missed(
    delivery_settings, tmp_path
):
    # given a receiver that got 400 occurrences, all to be recovered
    delivery_settings.WEBHOOK_URL = ""
    count = 400
    with ScriptedSink() as sink:
        crm = destination_create(
            settings=DestinationSettings(name="crm", url=sink.url), operator="ops"
        ).destination
        started = timezone.now()
        history = delivered_once(count, ("crm", sink))
        keys = {d.idempotency_key for d in history["crm"]}
        recovery = recovery_create(
            destination=crm, operator="ops", states=[DELIVERED], since=started, until=timezone.now()
        )
        assert recovery.total == count
        sink.default = Reply(delay=0.02)
        env = process_env(delivery_settings, DELIVERY_RECOVERY_BATCH=10)

        # when the worker doing it is killed with SIGKILL part of the way, and another takes over
        first = start_process(["run_worker"], env, tmp_path / "worker1.log")
        processes = [first]
        try:
            assert eventually(lambda: Recovery.objects.get().done >= 60, 60, interval=0.02), "no progress"
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=10)
            killed_at = Recovery.objects.get()
            assert killed_at.status == RecoveryStatus.RUNNING and killed_at.done < count
            processes.append(start_process(["run_worker"], env, tmp_path / "worker2.log"))
            wait_until(
                lambda: Recovery.objects.get().status == RecoveryStatus.FINISHED, 90, "the recovery to end"
            )
            wait_until(
                lambda: not Delivery.objects.exclude(status=DELIVERED).exists()
                and not Event.objects.filter(status=EventStatus.PROCESSING).exists(),
                90,
                "the resends",
            )
        finally:
            stop_all(processes)

        # then every delivery was queued again once and arrived again under its key
        recovery.refresh_from_db()
        assert (recovery.done, recovery.skipped, recovery.total) == (count, 0, count)
        received = Counter(sink.keys())
        assert set(received) == keys
        # Twice each (the first delivery and the recovery's); a third time only for a request the kill cut
        # short after it was sent, which is what the key is for.
        assert min(received.values()) == 2
        abandoned = DeliveryAttempt.objects.filter(outcome=AttemptOutcome.ABANDONED).count()
        assert sum(n - 2 for n in received.values()) <= abandoned
        assert Delivery.objects.filter(status=DELIVERED, requeued_at__isnull=False).count() == count
