"""manage.py check_process: the probe systemd timers, supervisor and cron run against the heartbeats."""

import os
import socket
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from devtools.suite_database import database_url
from runtime.heartbeats import heartbeat_beat, heartbeat_start
from runtime.models import ProcessHeartbeat, ProcessKind

BASE_DIR = Path(__file__).resolve().parents[2]


def beat(
    name: str, *, kind: str = ProcessKind.WORKER, host: str = "host-a", pid: int = 100, ago: float = 0
) -> None:
    heartbeat_start(kind=kind, name=name, host=host, pid=pid, zone_data="2025b")
    ProcessHeartbeat.objects.filter(name=name).update(last_seen_at=timezone.now() - timedelta(seconds=ago))


def check(*args: str, **options) -> str:
    out = StringIO()
    call_command("check_process", *args, stdout=out, **options)
    return out.getvalue().strip()


def check_fails(*args: str, **options) -> CommandError:
    with pytest.raises(CommandError) as failure:
        check(*args, **options)
    return failure.value


@pytest.mark.django_db
def test_a_fresh_heartbeat_passes_with_one_line():
    beat("host-a:100:aaaaaa", ago=10)

    assert check("--max-age", "60s", kind="worker") == "OK worker: 1 process(es) with a heartbeat within 60 s"


@pytest.mark.django_db
def test_a_silent_process_fails_with_exit_1_naming_it_and_how_long_ago():
    beat("host-a:100:aaaaaa", ago=300)

    failure = check_fails("--max-age", "1m", kind="worker")

    assert failure.returncode == 1
    assert str(failure) == (
        "STALE worker: 0 of 1 process(es) with a heartbeat within 60 s "
        "(newest host-a:100:aaaaaa silent, last seen 300 s ago)"
    )


@pytest.mark.django_db
def test_a_process_that_stopped_cleanly_is_not_running():
    heartbeat_start(
        kind=ProcessKind.WORKER, name="host-a:100:aaaaaa", host="host-a", pid=100, zone_data="2025b"
    )
    heartbeat_beat(
        kind=ProcessKind.WORKER,
        name="host-a:100:aaaaaa",
        host="host-a",
        pid=100,
        zone_data="2025b",
        processed=0,
        succeeded=0,
        failed=0,
        stopped=True,
    )

    failure = check_fails(kind="worker")

    assert failure.returncode == 1
    assert "newest host-a:100:aaaaaa stopped" in str(failure)


@pytest.mark.django_db
def test_nothing_ever_seen_fails_and_says_so():
    beat("host-a:100:aaaaaa", kind=ProcessKind.SCHEDULER)

    failure = check_fails(kind="worker")

    assert (failure.returncode, str(failure)) == (
        1,
        "STALE worker: 0 of 1 process(es) with a heartbeat within 60 s (no heartbeat ever)",
    )


@pytest.mark.django_db
def test_host_pid_and_name_narrow_the_check_to_one_process():
    beat("host-a:100:aaaaaa", host="host-a", pid=100)
    beat("host-b:200:bbbbbb", host="host-b", pid=200, ago=600)

    assert check(kind="worker", host="host-a", pid=100).startswith("OK worker host=host-a pid=100: 1 process")
    assert check(kind="worker", name="host-a:100:aaaaaa").startswith("OK")
    assert check_fails(kind="worker", host="host-b").returncode == 1
    assert check_fails(kind="worker", host="host-a", pid=200).returncode == 1


@pytest.mark.django_db
def test_min_count_asks_for_that_many_fresh_processes():
    beat("host-a:100:aaaaaa", pid=100)
    beat("host-a:101:cccccc", pid=101)
    beat("host-a:102:dddddd", pid=102, ago=120)

    assert check(kind="worker", host="host-a", min_count=2).startswith("OK worker host=host-a: 2 process(es)")
    failure = check_fails(kind="worker", host="host-a", min_count=3)
    assert "2 of 3 process(es)" in str(failure)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_exit_codes_of_the_real_command():
    url = database_url(connection.settings_dict)
    with socket.socket() as probe:  # nothing listens here once it closes
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    beat("host-a:100:aaaaaa")

    def run(database_url: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "manage.py", "check_process", *args],
            cwd=BASE_DIR,
            env={**os.environ, "DATABASE_URL": database_url},
            capture_output=True,
            text=True,
            timeout=60,
        )

    fresh = run(url, "--kind", "worker")
    stale = run(url, "--kind", "scheduler")
    unknown = run(f"postgres://postgres@127.0.0.1:{dead_port}/nowhere", "--kind", "worker")

    assert (fresh.returncode, fresh.stdout.strip()) == (
        0,
        "OK worker: 1 process(es) with a heartbeat within 60 s",
    )
    assert stale.returncode == 1
    assert stale.stderr.strip().splitlines() == [
        "CommandError: STALE scheduler: 0 of 1 process(es) with a heartbeat within 60 s (no heartbeat ever)"
    ]
    assert unknown.returncode == 2
    assert len(unknown.stderr.strip().splitlines()) == 1
    assert unknown.stderr.startswith("CommandError: UNKNOWN worker: cannot read heartbeats (")
