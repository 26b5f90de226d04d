"""Behind PgBouncer in transaction mode: the pipeline delivers everything once, through a restart too.

Each test starts a PgBouncer of its own (Debian's, as deploy/README.md
configures it: pool_mode = transaction, fewer server connections than
clients) on a free port in front of the test database, and runs real
run_scheduler and run_worker processes with DATABASE_URL pointing at it and
DATABASE_LISTEN_URL at the database server, as a deployment would. What
arrives at a real local receiver is counted: nothing lost, nothing twice.

PgBouncer refuses to run as root; as root (the CI container) it is started
with `-u postgres`, and its files live in a temporary folder of its own that
`postgres` can read, outside pytest's root-only tmp_path.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import psycopg
import pytest
from django.db import connection

from delivery.models import Delivery, DeliveryStatus
from delivery.tests import test_outage
from delivery.tests.pipeline import (
    create_due_users,
    process_env,
    start_process,
    stop_all,
    wait_until,
)
from delivery.tests.test_reliability import assert_everything_delivered_once, wait_for_outcomes_recorded
from devtools.ports import free_port
from devtools.sink import Reply
from runtime.models import ProcessHeartbeat
from scheduling.models import Event
from scheduling.tests.due import event_make_due_now

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# Fewer server connections than the processes open to PgBouncer (a scheduler's
# main connection and two claim threads, a connection per worker): transaction
# pooling has to share them.
POOL_SIZE = 3


class PgBouncer:
    """One PgBouncer process in transaction mode in front of a PostgreSQL server, restartable on its port."""

    def __init__(self, root: Path, *, server_host: str, server_port: int, defaults: bool = False) -> None:
        self.root = root
        self.server_host, self.server_port = server_host, server_port
        self.defaults = defaults
        self.port = free_port()
        self.config = root / "pgbouncer.ini"
        self.log = root / "pgbouncer.log"
        self.process: subprocess.Popen | None = None

    def url(self, dbname: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def write_config(self) -> None:
        (self.root / "users.txt").write_text('"postgres" ""\n')
        self.config.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.root / 'users.txt'}\n"
            "admin_users = postgres\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {POOL_SIZE}\n"
            "max_client_conn = 200\n"
            f"logfile = {self.log}\n"
            # What deploy/README.md asks for, unless the test wants PgBouncer's
            # own, much longer, defaults: a PostgreSQL restart is noticed at
            # once, and a client never waits for a server connection longer
            # than a worker's lease without being told.
            + ("" if self.defaults else "server_login_retry = 1\nquery_wait_timeout = 2\n")
        )

    def start(self) -> None:
        command = [PGBOUNCER, str(self.config)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
        self.process = subprocess.Popen(
            command, cwd=self.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(self._answers, 15, "PgBouncer to accept connections")

    def _answers(self) -> bool:
        assert self.process.poll() is None, f"PgBouncer exited with {self.process.returncode}"
        try:
            self.admin("SHOW VERSION")
            return True
        except psycopg.OperationalError:
            return False

    def kill(self) -> None:
        """Crash it: every client and server connection is cut at once."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def admin(self, command: str) -> list[dict]:
        """A command on PgBouncer's admin console (simple query protocol: a client-side cursor)."""
        with psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname="pgbouncer",
            autocommit=True,
            connect_timeout=2,
            cursor_factory=psycopg.ClientCursor,
        ) as conn:
            cursor = conn.execute(command)
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.fixture
def pgbouncer_for(tmp_path):
    """Start a PgBouncer in front of host:port (with PgBouncer's own timeouts if `defaults`); all are killed at the end."""
    if not Path(PGBOUNCER).exists():
        pytest.skip("needs Debian's pgbouncer (`make pgbouncer` installs it)")
    started: list[PgBouncer] = []

    def start(host: str, port: int, *, defaults: bool = False) -> PgBouncer:
        root = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        bouncer = PgBouncer(root, server_host=host, server_port=port, defaults=defaults)
        bouncer.write_config()
        if os.geteuid() == 0:
            for path in (root, *root.iterdir()):
                shutil.chown(path, "postgres", "postgres")
        started.append(bouncer)
        bouncer.start()
        return bouncer

    yield start
    for number, bouncer in enumerate(started):
        bouncer.kill()
        if bouncer.log.exists():
            shutil.copy(bouncer.log, tmp_path / f"pgbouncer-{number}.log")
        shutil.rmtree(bouncer.root, ignore_errors=True)


@pytest.fixture
def pgbouncer(pgbouncer_for):
    """A PgBouncer in front of the test database's server."""
    db = connection.settings_dict
    return pgbouncer_for(db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432))


def pooled_env(settings, bouncer: PgBouncer, *, listen: bool = True, **extra) -> dict:
    """A process environment as deploy/README.md configures it: work through PgBouncer, LISTEN direct."""
    direct = process_env(settings)["DATABASE_URL"]
    return process_env(
        settings,
        DATABASE_URL=bouncer.url(connection.settings_dict["NAME"]),
        DATABASE_TRANSACTION_POOLING="true",
        DATABASE_LISTEN_URL=direct if listen else "",
        **extra,
    )


class ConnectionCensus(threading.Thread):
    """Counts, several times a second, the connections of the processes under test: through PgBouncer and direct.

    A direct connection is one a process under test holds to the database server
    itself: a socket of that process (psutil) to the server's port, and the
    backend at its other end. Taken from the processes' own sockets rather than
    by subtracting PgBouncer's server connections from the server's backends,
    which would also count the test's own connections, other sessions' on the
    same server, and a server connection PgBouncer has opened but not yet logged
    in (no backend pid in SHOW SERVERS yet). Each direct connection is told by
    its backend's last statement: a LISTEN; none yet (pg_stat_activity's query
    is empty), as a listener's is from connecting until its first LISTEN, or
    again after reconnecting; or anything else.
    """

    def __init__(self, bouncer: PgBouncer, *, processes: list[subprocess.Popen]) -> None:
        super().__init__(daemon=True)
        self.bouncer = bouncer
        self.processes = [psutil.Process(process.pid) for process in processes]
        self.server_port = int(connection.settings_dict["PORT"] or 5432)
        self.dbname = connection.settings_dict["NAME"]
        self.stop = threading.Event()
        self.peak = Counter()

    def run(self) -> None:
        db = connection.settings_dict
        with psycopg.connect(
            host=db["HOST"] or "127.0.0.1",
            port=db["PORT"] or 5432,
            user=db["USER"] or "postgres",
            dbname=self.dbname,
            autocommit=True,
        ) as conn:
            while not self.stop.wait(0.1):
                try:
                    self.sample(conn)
                except psycopg.OperationalError:
                    pass  # PgBouncer is restarting: no sample this time

    def direct_ports(self) -> set[int]:
        """This machine's ports of the sockets the processes hold to the database server."""
        ports = set()
        for process in self.processes:
            try:
                sockets = process.net_connections(kind="tcp")
            except psutil.NoSuchProcess:
                continue
            ports |= {
                sock.laddr.port
                for sock in sockets
                if sock.raddr
                and sock.raddr.port == self.server_port
                and sock.status == psutil.CONN_ESTABLISHED
            }
        return ports

    def sample(self, conn: psycopg.Connection) -> None:
        servers = [row for row in self.bouncer.admin("SHOW SERVERS") if row["database"] == self.dbname]
        clients = [row for row in self.bouncer.admin("SHOW CLIENTS") if row["database"] == self.dbname]
        ports = self.direct_ports()
        last_statements = [
            query
            for (query,) in conn.execute(
                "SELECT query FROM pg_stat_activity WHERE client_port = ANY(%s)", [sorted(ports)]
            ).fetchall()
        ]
        now = {
            "pooled clients": len(clients),
            "server connections": len(servers),
            "server connections in a transaction": sum(row["state"] == "active" for row in servers),
            "direct": len(ports),
            "direct, LISTEN": sum(query.startswith("LISTEN") for query in last_statements),
            "direct, nothing run yet": sum(query == "" for query in last_statements),
            "direct, other": sum(query != "" and not query.startswith("LISTEN") for query in last_statements),
        }
        for name, count in now.items():
            self.peak[name] = max(self.peak[name], count)

    def __enter__(self) -> "ConnectionCensus":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.join(timeout=10)


def test_through_pgbouncer_a_scheduler_and_two_workers_deliver_1000_events_exactly_once_on_fewer_server_connections(
    delivery_settings, sink, tmp_path, pgbouncer
):
    # Given 1,000 due recipients and the processes configured for PgBouncer.
    create_due_users(1000)
    env = pooled_env(delivery_settings, pgbouncer)
    processes = [start_process(["run_scheduler", "--batch-size", "100"], env, tmp_path / "s.log")]
    processes += [
        start_process(["run_worker", "--concurrency", "8", "--batch-size", "50"], env, tmp_path / f"w{i}.log")
        for i in range(2)
    ]

    # When they run until everything has arrived...
    try:
        with ConnectionCensus(pgbouncer, processes=processes) as census:
            assert sink.wait_for(1000, timeout=180), f"only {len(set(sink.keys()))} of 1000 arrived"
            wait_for_outcomes_recorded(timeout=30)
            # A process opens its LISTEN connection when it first sleeps: once idle, all do.
            wait_until(lambda: census.peak["direct, LISTEN"] == 3, 15, "every process to listen")
    finally:
        exit_codes = stop_all(processes)

    # ...then every message arrived once, and every process stopped cleanly...
    assert exit_codes == [0, 0, 0]
    counts = assert_everything_delivered_once(sink, 1000)
    assert max(counts.values()) == 1, [key for key, n in counts.items() if n > 1][:5]
    assert ProcessHeartbeat.objects.filter(stopped_at__isnull=False).count() == 3

    # ...on fewer server connections than the processes had open to PgBouncer,
    # with nothing direct but one LISTEN per process.
    print("Peak connections during the run:", dict(census.peak))
    assert census.peak["server connections"] <= POOL_SIZE < census.peak["pooled clients"], census.peak
    assert census.peak["direct"] == 3, census.peak
    assert census.peak["direct, LISTEN"] == 3, census.peak
    assert census.peak["direct, other"] == 0, census.peak
    logs = "".join((tmp_path / name).read_text() for name in ("s.log", "w0.log", "w1.log"))
    assert "prepared statement" not in logs


def test_a_pgbouncer_restart_mid_delivery_loses_nothing_and_sends_nothing_twice(
    delivery_settings, sink, tmp_path, pgbouncer
):
    # Given 400 due recipients, a receiver answering in 30-150 ms so sends are in
    # flight, and a scheduler and two workers through PgBouncer.
    create_due_users(400)
    latency = random.Random(19)
    sink.respond = lambda received: Reply(status=200, delay=latency.uniform(0.03, 0.15))
    env = pooled_env(delivery_settings, pgbouncer)
    processes = [start_process(["run_scheduler", "--batch-size", "50"], env, tmp_path / "s.log")]
    processes += [
        start_process(["run_worker", "--concurrency", "4", "--batch-size", "20"], env, tmp_path / f"w{i}.log")
        for i in range(2)
    ]

    def sending_workers() -> int:
        return Delivery.objects.filter(status=DeliveryStatus.SENDING).values("locked_by").distinct().count()

    try:
        wait_until(
            lambda: len(sink.received) >= 40 and sending_workers() == 2, 60, "both workers to be sending"
        )
        # When PgBouncer crashes mid-delivery and is started again on its port a second later...
        pgbouncer.kill()
        arrived_at_crash = len(set(sink.keys()))
        time.sleep(1.0)
        pgbouncer.start()

        # ...everything is still delivered and recorded, with time for a resend to show.
        assert sink.wait_for(400, timeout=120), f"only {len(set(sink.keys()))} of 400 arrived"
        wait_for_outcomes_recorded(timeout=60)
        time.sleep(2)
    finally:
        exit_codes = stop_all(processes)

    # Then the crash came with work still to do, the processes rode it out...
    assert arrived_at_crash < 400
    assert exit_codes == [0, 0, 0]
    logs = "".join((tmp_path / name).read_text() for name in ("s.log", "w0.log", "w1.log"))
    assert "Database unavailable" in logs
    # ...and every message arrived once: nothing lost, nothing twice.
    counts = assert_everything_delivered_once(sink, 400)
    twice = sorted(key for key, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} messages arrived more than once: {twice[:5]}"


@pytest.mark.parametrize("listen", [True, False], ids=["listen-url", "polling"])
def test_through_pgbouncer_an_idle_worker_is_woken_by_the_listen_url_or_finds_work_within_its_interval(
    delivery_settings, sink, tmp_path, pgbouncer, listen
):
    # Given an event a month away, and a scheduler and worker through PgBouncer
    # that sleep up to 4 s between looks for work.
    create_due_users(1)
    event = Event.objects.get()
    Event.objects.filter(pk=event.pk).update(
        target_timestamp_utc=event.target_timestamp_utc.replace(year=2099)
    )
    env = pooled_env(delivery_settings, pgbouncer, listen=listen)
    processes = [
        start_process(["run_scheduler", "--interval", "4"], env, tmp_path / "s.log"),
        start_process(["run_worker", "--interval", "4"], env, tmp_path / "w.log"),
    ]
    try:
        wait_until(lambda: ProcessHeartbeat.objects.count() == 2, 30, "both processes to start")
        time.sleep(1.5)  # both asleep

        # When an operator sends it now...
        event.refresh_from_db()
        made_due_at = time.time()
        event_make_due_now(event=event)
        assert sink.wait_for(1, timeout=20)
    finally:
        assert stop_all(processes) == [0, 0]

    # ...then a LISTEN on the server wakes both at once; without one, each finds
    # the work at its next look, at most an interval later: two hops, two intervals.
    latency = sink.received[0].received_at - made_due_at
    logs = (tmp_path / "s.log").read_text() + (tmp_path / "w.log").read_text()
    if listen:
        assert latency < 2, latency
        assert "without DATABASE_LISTEN_URL" not in logs
    else:
        assert latency < 2 * 4 + 2, latency
        assert logs.count("without DATABASE_LISTEN_URL") == 2


# Run by `manage.py shell` through PgBouncer: the scheduler's claim, each time in a
# transaction of its own, on one server connection and then another: every other
# claim, a second client holds the server connection the claim last used.
ALTERNATING_SERVER_CONNECTIONS = """
import os, psycopg
from django.db import connection, transaction
from delivery.dispatch.claim import deliveries_enqueue_due

if os.environ.get("FORCE_PREPARE_THRESHOLD"):
    connection.close()
    connection.settings_dict["OPTIONS"]["prepare_threshold"] = int(os.environ["FORCE_PREPARE_THRESHOLD"])
other = psycopg.connect(os.environ["OTHER_CLIENT"], autocommit=True)
backends = set()


def claim():
    with transaction.atomic(), connection.cursor() as cursor:
        deliveries_enqueue_due(batch_size=10)
        cursor.execute("SELECT pg_backend_pid()")
        backends.add(cursor.fetchone()[0])


try:
    for _ in range(6):
        claim()  # on the server connection PgBouncer freed last...
        with other.transaction():
            other.execute("SELECT 1")  # ...which the other client now takes...
            claim()  # ...so this claim runs on another
    print("claims done on", len(backends), "server connections")
except Exception as exc:
    print("claims failed:", type(exc).__name__, exc)
"""


@pytest.mark.parametrize(
    "forced_threshold, outcome",
    [(None, "claims done on 2 server connections"), (5, "prepared statement")],
    ids=["as-configured", "server-side-prepares"],
)
def test_the_same_statement_on_changing_server_connections_runs_because_nothing_is_prepared_on_the_server(
    settings, tmp_path, pgbouncer, forced_threshold, outcome
):
    # Given the scheduler's claim run again and again, each time on another
    # server connection behind PgBouncer...
    env = pooled_env(settings, pgbouncer, WEBHOOK_URL="http://127.0.0.1:9/")
    env["OTHER_CLIENT"] = env["DATABASE_URL"].replace("postgres://", "postgresql://")
    if forced_threshold is not None:
        env["FORCE_PREPARE_THRESHOLD"] = str(forced_threshold)

    # When it runs as configured, and with psycopg's server-side prepares forced on...
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", ALTERNATING_SERVER_CONNECTIONS],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    # ...then as configured every run succeeds; prepared, a run meets a server
    # connection that never saw the statement.
    assert outcome in result.stdout, result.stdout + result.stderr


# Run by `manage.py shell` through PgBouncer: the server connection under a
# transaction is terminated (as a PostgreSQL restart does), then the transaction
# goes on with NEXT: a COPY (a worker recording outcomes) or the next statement.
AFTER_LOSING_THE_SERVER = """
import os, time, psycopg
from django.db import OperationalError, connection, transaction
from runtime.copy import copy_rows
from runtime.models import ProcessHeartbeat
from runtime.sql import execute

direct = psycopg.connect(os.environ["DIRECT"], autocommit=True)
try:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        direct.execute("SELECT pg_terminate_backend(%s)", [cursor.fetchone()[0]])
        time.sleep(0.5)
        if os.environ["NEXT"] == "copy":
            copy_rows(ProcessHeartbeat, ["name"], [("after-loss",)])
        else:
            execute("SELECT 1", [])
    print("went on")
except OperationalError as exc:
    print("database away:", exc)
except Exception as exc:
    print("other error:", type(exc).__name__, exc)
"""


@pytest.mark.parametrize("next_step", ["copy", "statement"])
def test_a_server_connection_lost_under_a_transaction_behind_pgbouncer_is_the_database_going_away(
    settings, pgbouncer, next_step
):
    # Given a transaction through PgBouncer whose server connection is terminated...
    env = pooled_env(settings, pgbouncer, WEBHOOK_URL="http://127.0.0.1:9/", NEXT=next_step)
    env["DIRECT"] = env["DATABASE_LISTEN_URL"].replace("postgres://", "postgresql://")

    # When the transaction goes on...
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", AFTER_LOSING_THE_SERVER],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    # ...then it fails as an outage the processes wait out, not as a bug that stops them.
    assert "database away" in result.stdout, result.stdout + result.stderr


# The private cluster of test_outage, which this module stops and starts too (the
# shared one is never restarted).
private_postgres = test_outage.private_postgres


@pytest.mark.parametrize("defaults", [False, True], ids=["as-documented", "pgbouncer-defaults"])
def test_a_postgresql_restart_behind_pgbouncer_mid_delivery_loses_nothing_and_sends_nothing_twice(
    private_postgres, pgbouncer_for, delivery_settings, sink, tmp_path, defaults
):
    # Given 300 due recipients in a private cluster, PgBouncer in front of it, and
    # a scheduler and two workers through PgBouncer with sends in flight. With
    # PgBouncer's defaults, a worker's statement waits out the outage in PgBouncer
    # instead of failing, and the other's reconnections are refused for a
    # while after it: the first must not take the second's leases over meanwhile.
    cluster = private_postgres
    test_outage.manage(["shell", "-c", test_outage.CREATE_DUE_RECIPIENTS], cluster.database_url)
    bouncer = pgbouncer_for("127.0.0.1", cluster.port, defaults=defaults)
    recipients = test_outage.RECIPIENTS
    latency = random.Random(1918)
    sink.respond = lambda received: Reply(status=200, delay=latency.uniform(0.03, 0.15))
    env = process_env(
        delivery_settings,
        DATABASE_URL=bouncer.url(test_outage.DATABASE_NAME),
        DATABASE_TRANSACTION_POOLING="true",
        DATABASE_LISTEN_URL=cluster.database_url,
    )
    processes = [start_process(["run_scheduler", "--batch-size", "50"], env, tmp_path / "s.log")]
    processes += [
        start_process(["run_worker", "--concurrency", "4", "--batch-size", "20"], env, tmp_path / f"w{i}.log")
        for i in range(2)
    ]
    delivery_table, event_table = Delivery._meta.db_table, Event._meta.db_table

    def count(sql: str) -> int:
        return cluster.query(sql)[0][0]

    try:
        wait_until(
            lambda: len(sink.received) >= 30
            and count(f"SELECT count(DISTINCT locked_by) FROM {delivery_table} WHERE status = 'SENDING'")
            == 2,
            60,
            "both workers to be sending",
        )
        # When PostgreSQL restarts under PgBouncer, for longer than a lease...
        cluster.stop()
        arrived_at_stop = len(set(sink.keys()))
        time.sleep(test_outage.OUTAGE_SECONDS)
        cluster.start()

        # ...everything is still delivered and recorded, with time for a resend to show.
        assert sink.wait_for(recipients, timeout=120), f"only {len(set(sink.keys()))} of {recipients} arrived"
        wait_until(
            lambda: count(f"SELECT count(*) FROM {delivery_table} WHERE status <> 'DELIVERED'") == 0,
            60,
            "every outcome to be recorded",
        )
        time.sleep(2)
    finally:
        exit_codes = stop_all(processes)

    assert arrived_at_stop < recipients
    assert exit_codes == [0, 0, 0]
    counts = Counter(sink.keys())
    assert len(counts) == recipients, f"{recipients - len(counts)} messages never arrived"
    twice = sorted(key for key, n in counts.items() if n > 1)
    assert not twice, f"{len(twice)} messages arrived more than once: {twice[:5]}"
    events = dict(cluster.query(f"SELECT status, count(*) FROM {event_table} GROUP BY status"))
    assert events == {"COMPLETED": recipients, "PENDING": recipients}, events
