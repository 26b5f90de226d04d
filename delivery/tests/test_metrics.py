"""The scheduler's and worker's own instruments, and the port each serves them on."""

import signal
import socket
import urllib.request

import pytest
from django.core.management import CommandError, call_command
from prometheus_client import REGISTRY

from delivery.dispatch.scheduler import Scheduler
from delivery.tests.pipeline import make_due, process_env, start_process, wait_until
from delivery.worker.loop import Worker
from devtools.ports import free_port
from devtools.sink import Reply
from runtime.models import ProcessHeartbeat, ProcessKind
from scheduling.zonedata import zone_data_version
from users.tests.factories import UserFactory


def sample(name: str, **labels) -> float:
    """The current value in this process's registry (the instruments are process-wide: tests compare before/after)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.django_db
def test_a_worker_iteration_observes_each_attempt_by_outcome_in_seconds_and_its_claim(
    delivery_settings, sink
):
    slow, refused = (user.events.get() for user in UserFactory.create_batch(2))
    sink.script(slow.idempotency_key, Reply(status=200, delay=0.3))
    sink.script(refused.idempotency_key, Reply(status=400))
    make_due([slow, refused])
    Scheduler(once=True).run()
    attempts = "birthday_delivery_attempt_duration_seconds"
    before = {
        "delivered": sample(f"{attempts}_count", outcome="DELIVERED"),
        "delivered within 0.25 s": sample(f"{attempts}_bucket", outcome="DELIVERED", le="0.25"),
        "delivered within 0.5 s": sample(f"{attempts}_bucket", outcome="DELIVERED", le="0.5"),
        "permanent": sample(f"{attempts}_count", outcome="PERMANENT_FAILURE"),
        "transient": sample(f"{attempts}_count", outcome="TRANSIENT_FAILURE"),
        "claims": sample("birthday_claim_batch_duration_seconds_count", kind="worker"),
    }

    Worker(once=True).run()

    after = {
        "delivered": sample(f"{attempts}_count", outcome="DELIVERED"),
        "delivered within 0.25 s": sample(f"{attempts}_bucket", outcome="DELIVERED", le="0.25"),
        "delivered within 0.5 s": sample(f"{attempts}_bucket", outcome="DELIVERED", le="0.5"),
        "permanent": sample(f"{attempts}_count", outcome="PERMANENT_FAILURE"),
        "transient": sample(f"{attempts}_count", outcome="TRANSIENT_FAILURE"),
        "claims": sample("birthday_claim_batch_duration_seconds_count", kind="worker"),
    }
    assert {key: after[key] - before[key] for key in before} == {
        "delivered": 1,
        # The receiver held it 0.3 s: observed in seconds, in the (0.25, 0.5] bucket.
        "delivered within 0.25 s": 0,
        "delivered within 0.5 s": 1,
        "permanent": 1,
        "transient": 0,
        # Both in one batch; the empty look that ended the run is not a batch.
        "claims": 1,
    }


@pytest.mark.django_db
def test_the_scheduler_observes_batches_that_found_work_only(delivery_settings):
    before = sample("birthday_claim_batch_duration_seconds_count", kind="scheduler")
    Scheduler(once=True).run()
    assert sample("birthday_claim_batch_duration_seconds_count", kind="scheduler") == before

    make_due([user.events.get() for user in UserFactory.create_batch(2)])
    Scheduler(once=True).run()

    assert sample("birthday_claim_batch_duration_seconds_count", kind="scheduler") == before + 1


@pytest.mark.django_db
def test_schedulers_and_workers_export_and_record_the_zone_data_they_compute_with(delivery_settings):
    Scheduler(once=True).run()
    Worker(once=True).run()

    assert sample("birthday_zone_data_info", version=zone_data_version()) == 1
    # and their heartbeats say it, for the console's process table
    assert set(ProcessHeartbeat.objects.values_list("kind", "zone_data")) == {
        (ProcessKind.SCHEDULER, zone_data_version()),
        (ProcessKind.WORKER, zone_data_version()),
    }


@pytest.mark.parametrize("command", ["run_worker", "run_scheduler"])
def test_a_metrics_port_in_use_stops_the_command_with_one_line(delivery_settings, command):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        with pytest.raises(CommandError, match=rf"^Cannot serve metrics on 127\.0\.0\.1:{port}: "):
            call_command(command, once=True, metrics_port=port)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", ["run_worker", "run_scheduler"])
def test_a_running_process_serves_its_metrics_on_its_port(delivery_settings, tmp_path, command):
    port = free_port()
    process = start_process(
        [command, "--metrics-port", str(port)], process_env(delivery_settings), tmp_path / "log"
    )
    try:

        def scraped() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
                    return response.read().decode()
            except OSError:
                return None

        wait_until(lambda: scraped() is not None, 30, "the metrics port to answer")
        body = scraped()
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)

    # Every series exists from the start, at zero, beside the process's own (memory, CPU).
    assert 'birthday_delivery_attempt_duration_seconds_count{outcome="TRANSIENT_FAILURE"} 0.0' in body
    assert 'birthday_claim_batch_duration_seconds_count{kind="scheduler"} 0.0' in body
    assert "process_resident_memory_bytes" in body
    assert f'birthday_zone_data_info{{version="{zone_data_version()}"}} 1.0' in body
    assert code == 0, (tmp_path / "log").read_text()
