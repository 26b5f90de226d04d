"""Doing the bad thing for real: real processes, a real receiver, kills and lost connections.

Every test counts what arrived at the receiver: nothing lost, nothing delivered
twice except under the same idempotency key.
"""

import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from delivery.destinations.fields import DestinationSettings
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus
from delivery.tests.pipeline import (
    assert_each_receiver_accepted_each_key_once,
    assert_every_delivery_delivered_and_event_completed,
    create_due_users,
    process_env,
    receivers,
    settled,
    shown_attempts,
    start_process,
    stop_all,
    wait_until,
)
from delivery.worker.loop import Worker
from devtools.sink import Reply
from runtime.models import ProcessHeartbeat
from scheduling.models import Event, EventStatus
from scheduling.tests.due import event_make_due_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def wait_for_outcomes_recorded(*, timeout: float) -> None:
    """Every delivery DELIVERED and no event still PROCESSING."""
    wait_until(settled, timeout, "every outcome to be recorded")


def assert_everything_delivered_once(sink, expected: int):
    counts = Counter(sink.keys())
    assert len(counts) == expected, f"{expected - len(counts)} events never arrived"
    assert Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == expected
    assert not Delivery.objects.exclude(status=DeliveryStatus.DELIVERED).exists()
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == expected
    assert not Event.objects.filter(status=EventStatus.PROCESSING).exists()
    return counts


@pytest.mark.parametrize(
    ("destinations", "events"), [(1, 2000), (3, 1000)], ids=["one-destination", "three-destinations"]
)
def test_two_schedulers_and_four_workers_deliver_every_event_exactly_once(
    delivery_settings, sink, tmp_path, destinations, events
):
    # given the default destination's receiver, or three destinations at three receivers, and the events due
    with receivers(delivery_settings, sink, destinations) as sinks:
        create_due_users(events)
        keys = set(Event.objects.filter(status=EventStatus.PENDING).values_list("idempotency_key", flat=True))
        env = process_env(delivery_settings)
        # when two schedulers and four workers share the work
        processes = [
            start_process(["run_scheduler", "--batch-size", "200"], env, tmp_path / f"s{i}.log")
            for i in range(2)
        ]
        processes += [
            start_process(
                ["run_worker", "--concurrency", "4", "--batch-size", "50"], env, tmp_path / f"w{i}.log"
            )
            for i in range(4)
        ]
        try:
            for each in sinks:
                assert each.wait_for(events, timeout=180), f"only {len(set(each.keys()))} of {events} arrived"
            wait_for_outcomes_recorded(timeout=60)
        finally:
            exit_codes = stop_all(processes)

    # then each receiver accepted each event once, and each event completed once
    assert exit_codes == [0] * 6
    assert_each_receiver_accepted_each_key_once(sinks, keys)
    assert_every_delivery_delivered_and_event_completed(events=events, destinations=destinations)
    assert Event.objects.filter(status=EventStatus.PENDING).count() == events  # next year's, one each
    assert ProcessHeartbeat.objects.filter(stopped_at__isnull=False).count() == 6


def test_sigkill_mid_delivery_is_resent_with_the_same_key_after_the_lease(delivery_settings, sink, tmp_path):
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=3)
    create_due_users(1)
    deliveries_enqueue_due()
    delivery = Delivery.objects.get()
    # The receiver holds the first request (the worker is killed meanwhile), then accepts.
    sink.script(delivery.idempotency_key, Reply(status=200, delay=20), Reply(status=200))
    env = process_env(delivery_settings)

    doomed = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "doomed.log")
    wait_until(lambda: len(sink.received) == 1, 30, "the first request to reach the receiver")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SENDING  # stranded until its lease runs out
    lease_ends = delivery.locked_until

    rescuer = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "rescuer.log")
    try:
        wait_until(
            lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DELIVERED,
            60,
            "the delivery to be taken over and delivered",
        )
    finally:
        assert stop_all([rescuer]) == [0]

    assert sink.keys() == [delivery.idempotency_key, delivery.idempotency_key]
    assert sink.received[1].received_at >= lease_ends.timestamp() - 0.5
    attempts = list(shown_attempts(Delivery.objects.get(pk=delivery.pk), "number", "outcome"))
    assert attempts == [(1, AttemptOutcome.ABANDONED), (2, AttemptOutcome.DELIVERED)]
    assert Event.objects.get(pk=delivery.event_id).status == EventStatus.COMPLETED


def test_sigkill_mid_send_to_three_destinations_resends_each_once_with_the_same_key(
    delivery_settings, tmp_path
):
    from delivery.destinations.services import destination_create
    from delivery.tests.pipeline import ScriptedSink

    delivery_settings.WEBHOOK_URL = ""
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=3)
    with ScriptedSink() as crm, ScriptedSink() as chat, ScriptedSink() as hr:
        sinks = (crm, chat, hr)
        for name, sink, format_ in (("crm", crm, "standard"), ("chat", chat, "slack"), ("hr", hr, "teams")):
            destination_create(
                settings=DestinationSettings(name=name, url=sink.url, format=format_), operator="ops"
            )
        create_due_users(1)
        deliveries_enqueue_due()
        event = Event.objects.get(status=EventStatus.PROCESSING)
        # Every receiver holds the first request (the worker is killed meanwhile), then accepts.
        for sink in sinks:
            sink.script(event.idempotency_key, Reply(status=200, delay=20), Reply(status=200))
        env = process_env(delivery_settings)

        doomed = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "doomed.log")
        wait_until(lambda: all(len(sink.received) == 1 for sink in sinks), 30, "a request at each receiver")
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=10)
        assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.SENDING}

        rescuer = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "rescuer.log")
        try:
            wait_until(
                lambda: Event.objects.get(pk=event.pk).status == EventStatus.COMPLETED,
                60,
                "every delivery to be taken over and delivered, and the event completed",
            )
        finally:
            assert stop_all([rescuer]) == [0]

        for sink in sinks:
            assert sink.keys() == [event.idempotency_key, event.idempotency_key]
        for delivery in Delivery.objects.all():
            assert list(shown_attempts(delivery, "number", "outcome")) == [
                (1, AttemptOutcome.ABANDONED),
                (2, AttemptOutcome.DELIVERED),
            ]


@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_sigterm_during_sends_exits_0_loses_nothing_and_leaves_nothing_sending(
    delivery_settings, sink, tmp_path, concurrency
):
    create_due_users(40)
    deliveries_enqueue_due()
    sink.default = Reply(status=200, delay=0.3)
    env = process_env(delivery_settings)

    worker = start_process(
        ["run_worker", "--concurrency", concurrency, "--batch-size", "20"], env, tmp_path / "w.log"
    )
    wait_until(lambda: len(sink.received) >= 4, 30, "sends to be under way")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0

    assert not Delivery.objects.filter(status=DeliveryStatus.SENDING).exists()
    delivered_before_stop = Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count()
    assert delivered_before_stop == len(set(sink.keys())) < 40
    handed_back = Delivery.objects.filter(status=DeliveryStatus.QUEUED)
    assert handed_back.count() == 40 - delivered_before_stop
    assert set(handed_back.values_list("attempts", flat=True)) == {0}
    log = (tmp_path / "w.log").read_text()
    assert "Handed back" in log
    # runtime's own INFO line reaches the log like every app's (not only delivery's).
    assert "SIGTERM received: the worker is finishing its work" in log

    sink.default = Reply(status=200)
    Worker(once=True).run()

    counts = assert_everything_delivered_once(sink, 40)
    assert max(counts.values()) == 1


def test_a_live_worker_renews_its_leases_so_a_slow_batch_is_not_taken_over(delivery_settings, sink, tmp_path):
    # Lease = 4 s timeout + 1 s margin; the batch of three 3-second sends takes 9 s.
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=4)
    create_due_users(3)
    deliveries_enqueue_due()
    sink.default = Reply(status=200, delay=3)
    env = process_env(delivery_settings)

    slow = start_process(
        ["run_worker", "--concurrency", "1", "--batch-size", "3"], env, tmp_path / "slow.log"
    )
    wait_until(lambda: len(sink.received) == 1, 30, "the slow batch to start")
    thief = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "thief.log")
    try:
        wait_until(
            lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 3,
            60,
            "the slow batch to finish",
        )
    finally:
        assert stop_all([slow, thief]) == [0, 0]

    assert sorted(Counter(sink.keys()).values()) == [1, 1, 1]
    assert not DeliveryAttempt.objects.filter(outcome=AttemptOutcome.ABANDONED).exists()


def test_killed_database_connections_do_not_stop_the_scheduler_or_worker(delivery_settings, sink, tmp_path):
    create_due_users(400)
    sink.default = Reply(status=200, delay=0.03)
    env = process_env(delivery_settings)
    processes = [
        start_process(["run_scheduler", "--batch-size", "50"], env, tmp_path / "s.log"),
        start_process(["run_worker", "--concurrency", "4", "--batch-size", "20"], env, tmp_path / "w.log"),
    ]
    try:
        wait_until(lambda: len(sink.received) >= 20, 30, "work to be under way")
        terminated = 0
        for _ in range(3):
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                terminated += cursor.fetchone()[0]
            time.sleep(0.7)
        assert terminated >= 4  # both processes' connections, more than once
        assert sink.wait_for(400, timeout=120), f"only {len(set(sink.keys()))} of 400 arrived"
        wait_for_outcomes_recorded(timeout=60)
    finally:
        exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    assert_everything_delivered_once(sink, 400)
    logs = (tmp_path / "s.log").read_text() + (tmp_path / "w.log").read_text()
    assert "Database unavailable" in logs or "Notification connection lost" in logs


def test_an_idle_scheduler_and_worker_are_woken_by_notifications_not_their_interval(
    delivery_settings, sink, tmp_path
):
    create_due_users(1)
    event = Event.objects.get()
    Event.objects.filter(pk=event.pk).update(target_timestamp_utc=timezone.now() + timedelta(days=30))
    env = process_env(delivery_settings)
    processes = [
        start_process(["run_scheduler", "--interval", "30"], env, tmp_path / "s.log"),
        start_process(["run_worker", "--interval", "30"], env, tmp_path / "w.log"),
    ]
    try:
        wait_until(lambda: ProcessHeartbeat.objects.count() == 2, 30, "both processes to start")
        time.sleep(1.5)  # both are now asleep for up to 30 s

        event.refresh_from_db()
        made_due_at = time.time()
        event_make_due_now(event=event)

        assert sink.wait_for(1, timeout=10)
        # Polling alone would have taken up to 30 s, twice.
        assert sink.received[0].received_at - made_due_at < 5
    finally:
        assert stop_all(processes) == [0, 0]


def test_the_scheduler_sleeps_until_the_next_target_instead_of_a_whole_interval(
    delivery_settings, sink, tmp_path
):
    create_due_users(1)
    # Far enough ahead for both processes to start on a loaded machine, and well
    # short of the 30 s a scheduler sleeping whole intervals would wait.
    target = timezone.now() + timedelta(seconds=12)
    Event.objects.update(target_timestamp_utc=target)  # no notification: plain UPDATE
    env = process_env(delivery_settings)
    processes = [
        start_process(["run_scheduler", "--interval", "30"], env, tmp_path / "s.log"),
        start_process(["run_worker", "--interval", "30"], env, tmp_path / "w.log"),
    ]
    try:
        assert sink.wait_for(1, timeout=30)
        lateness = sink.received[0].received_at - target.timestamp()
        assert 0 <= lateness < 2
    finally:
        assert stop_all(processes) == [0, 0]


def test_reconcile_repairs_orphans_chunk_after_chunk_without_waiting_for_the_interval(
    delivery_settings, monkeypatch
):
    import threading

    from delivery.dispatch import scheduler as scheduler_module
    from delivery.dispatch.scheduler import Scheduler
    from users.models import User

    monkeypatch.setattr(scheduler_module, "RECONCILE_CHUNK", 3)
    User.objects.bulk_create(  # no signals: no events
        [
            User(first_name=f"Orphan{i}", last_name="X", date_of_birth="1990-01-01", timezone="UTC")
            for i in range(10)
        ]
    )
    stop = threading.Event()
    scheduler = Scheduler(interval=0.05, stop=stop)  # reconcile interval stays at 5 minutes
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    try:
        wait_until(
            lambda: Event.objects.filter(status=EventStatus.PENDING).count() == 10,
            20,
            "every orphan to be repaired",
        )
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


@pytest.mark.parametrize("command", ["run_worker", "run_scheduler"])
def test_once_with_the_database_unreachable_exits_1_with_one_clear_line(settings, tmp_path, command):
    # given nothing listens where the database should be
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = process_env(
        settings,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/nowhere",
        WEBHOOK_URL="http://127.0.0.1:9/",
    )

    # when a --once run is started
    result = subprocess.run(
        [sys.executable, "manage.py", command, "--once"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    # then it gives up with exit code 1 and says why on one line, without a traceback
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "Database unavailable" in result.stderr
    assert "CommandError: Database unavailable" in result.stderr.strip().splitlines()[-1]
