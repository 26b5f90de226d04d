"""What every workload runs in: the bench databases, the receiver, the product's processes, the results.

One `Harness` per `python -m bench.run`: `setup` creates and migrates the databases and starts
the receiver, each workload measures through it, `teardown` stops everything and drops the
databases.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import psycopg

from bench import sql
from bench.locations import (
    BENCH_PY,
    POSTGRES,
    PROCRASTINATE_DATABASE,
    PRODUCT_DATABASE,
    PRODUCT_DSN,
    PRODUCT_PY,
    RAW,
    ROOT,
)
from bench.machine import machine_info
from bench.processes import Processes
from bench.receiver import Receiver

T = TypeVar("T")


def log(msg: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {msg}", flush=True)


def process_failure(*, output: str, shown: str) -> Exception:
    """What to raise for a product process that failed, given what it printed.

    PostgreSQL going away (another suite restarting it) is an OperationalError, which
    `Harness.attempt` answers by repeating the run; anything else is the process's own failure.
    """
    if "Operational" in output:
        return psycopg.OperationalError(output[-500:])
    return RuntimeError(shown)


class Harness:
    """The run's receiver, processes, database connection and results, shared by every workload."""

    def __init__(self, *, size: str, sizes: dict[str, int]) -> None:
        self.size = size
        self.receiver = Receiver()
        self.processes = Processes()
        self.conn: psycopg.Connection | None = None
        # results.json: what bench/report.py renders. "sizes" is every workload's size as run.
        self.results: dict = {"size": size, "sizes": sizes, "started": datetime.now(UTC).isoformat()}
        self.tags = 0
        self.patch_listener = False

    def tag(self, what: str) -> str:
        """A name no other run of this process uses, for the rows and keys one measurement writes."""
        self.tags += 1
        return f"{what}{self.tags}-{int(time.time())}"

    def sizes_decided(self, **decided: int) -> None:
        """Record sizes a workload chose while it ran (from a rate it measured), for the report."""
        self.results["sizes"].update(decided)

    def env(self, **extra) -> dict:
        """The environment of a product process: the bench database, the receiver, quiet logs."""
        env = dict(os.environ)
        # PYTHONDONTWRITEBYTECODE (some shells set it): without the bytecode cache each process
        # compiles the product afresh at its start, which no deployment does; it would time that too.
        for var in ("DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"):
            env.pop(var, None)
        env.update(
            DATABASE_URL=PRODUCT_DSN,
            WEBHOOK_URL=self.receiver.url,
            # The receivers are nginx on 127.0.0.1 over http, which the worker refuses unless allowed.
            WEBHOOK_ALLOW_HTTP="true",
            WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
            WEBHOOK_TIMEOUT="10s",
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            BENCH_PATCH_LISTENER="1" if self.patch_listener else "0",
            # The throttles still run (their cost is part of the product), but
            # no benchmark client should ever be told to slow down.
            API_THROTTLE_ACCOUNT="1000000/second",
        )
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def manage(
        self, *args: str, env: dict | None = None, timeout: float = 3600
    ) -> subprocess.CompletedProcess:
        """`manage.py <args>` with the product's venv, to its exit."""
        return subprocess.run(
            [PRODUCT_PY, "manage.py", *args],
            cwd=ROOT,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def probe(self, module: str, *args: str, env: dict, timeout: float | None = None) -> dict:
        """`python -m bench.<module> <args>` with the product's venv, to its exit: the JSON of its last line of output."""
        r = subprocess.run(
            [PRODUCT_PY, "-m", f"bench.{module}", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if r.returncode:
            raise process_failure(output=r.stderr, shown=r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    def receiver_columns(self, *urls: str) -> dict[str, dict[str, str]]:
        """How the product stores each receiver URL (encrypted, its key, its redacted form), by URL."""
        return self.probe("receiver_columns", *urls, env=self.env())

    def receiver_key(self, url: str) -> str:
        """The key deliveries to `url` name their endpoint by (Delivery.endpoint_key)."""
        return self.receiver_columns(url)[url]["url_key"]

    def save(self) -> None:
        (RAW / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    # --- setup / teardown ---------------------------------------------------------------

    def setup(self) -> None:
        RAW.mkdir(parents=True, exist_ok=True)
        self.results["machine"] = machine_info()
        log(f"machine: {self.results['machine']}")
        for attempt in range(4):  # other suites restart PostgreSQL now and then
            try:
                self.wait_for_postgres()
                admin = sql.connect(f"{POSTGRES}/postgres")
                for name in (PRODUCT_DATABASE, PROCRASTINATE_DATABASE):
                    admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                    admin.execute(f"CREATE DATABASE {name}")
                admin.close()
                r = self.manage("migrate", "--noinput")
                if r.returncode:
                    raise RuntimeError("migrate failed:\n" + r.stdout + r.stderr)
                self.conn = sql.connect(PRODUCT_DSN)
                break
            except (psycopg.OperationalError, RuntimeError) as exc:
                if attempt == 3:
                    raise
                log(f"setup disturbed ({str(exc).strip().splitlines()[-1][:100]}); again")
                time.sleep(3)
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS bench_bare_insert (id bigserial PRIMARY KEY, body jsonb, created_at timestamptz DEFAULT now())"
        )
        self.receiver.start()
        self.results["receiver"] = {
            "kind": "nginx (Debian package), 1 worker process, buffered access log",
            "latency_variant": "nginx echo_sleep 0.05 (libnginx-mod-http-echo)",
        }
        log(f"receiver up on {self.receiver.url} and {self.receiver.url_slow}")
        self.results["listener_check"] = self.listener_check()
        self.patch_listener = self.results["listener_check"]["hangs"]
        log(f"listener check: {self.results['listener_check']['verdict']}")

    def listener_check(self) -> dict:
        """Does an idle run_worker, as committed, deliver a delivery it is woken for by NOTIFY?"""
        self.truncate()
        tag = self.tag("wake")
        self.patch_listener = False
        worker = self.processes.spawn("worker", ["-m", "bench.product_main", "run_worker"], env=self.env())
        time.sleep(5)  # started and idle in Listener.wait
        reader = self.receiver.reader()
        with self.conn.transaction():
            sql.users_and_events(self.conn, tag=tag, n=1, target_sql="now()", status="PROCESSING")
            sql.deliveries(self.conn, tag=tag, n=1, key=self.receiver_key(self.receiver.url))
            self.conn.execute("NOTIFY birthday_delivery_queued")
        expected = {
            k for (k,) in self.conn.execute("SELECT idempotency_key FROM delivery_delivery").fetchall()
        }
        counts = reader.wait_for(expected, timeout=6)
        dump = subprocess.run(
            [str(Path(BENCH_PY).parent / "py-spy"), "dump", "--pid", str(worker.pid)],
            capture_output=True,
            text=True,
        ).stdout
        # Idle waits end within --interval (1 s) even with no notification, so a second
        # delivery queued without NOTIFY shows whether the loop still turns at all.
        tag2 = self.tag("wake")
        sql.users_and_events(self.conn, tag=tag2, n=1, target_sql="now()", status="PROCESSING")
        sql.deliveries(self.conn, tag=tag2, n=1, key=self.receiver_key(self.receiver.url))
        expected2 = {
            k for (k,) in self.conn.execute("SELECT idempotency_key FROM delivery_delivery").fetchall()
        } - expected
        counts2 = reader.wait_for(expected2, timeout=4)
        self.processes.stop([worker], timeout=5)
        hangs = counts["missing"] > 0 and counts2["missing"] > 0
        return {
            "hangs": hangs,
            "delivered_after_notify": counts["unique"],
            "delivered_after_poll": counts2["unique"],
            "py_spy_dump": dump,
            "verdict": (
                "run_worker as committed HANGS after its first NOTIFY wake-up; measuring with the bench/product_main.py work-around"
                if hangs
                else "run_worker wakes on NOTIFY and delivers; no work-around applied"
            ),
        }

    def teardown(self) -> None:
        self.processes.stop_all()
        self.receiver.stop()
        if self.conn:
            self.conn.close()
        try:
            admin = sql.connect(f"{POSTGRES}/postgres")
            for name in (PRODUCT_DATABASE, PROCRASTINATE_DATABASE):
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.close()
        except Exception as exc:  # noqa: BLE001
            log(f"could not drop the bench databases: {exc}")

    # --- PostgreSQL, shared with other suites that restart it -------------------------------

    def wait_for_postgres(self, *, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", "5432"]).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("PostgreSQL is not accepting connections")
            time.sleep(1)

    def reconnect(self) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                if self.conn is not None:
                    self.conn.close()
                self.conn = sql.connect(PRODUCT_DSN)
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)

    def pg_started(self) -> datetime:
        """When the PostgreSQL server started: a later value means it restarted meanwhile."""
        try:
            return self.conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]
        except psycopg.Error:
            self.reconnect()
            return self.conn.execute("SELECT pg_postmaster_start_time()").fetchone()[0]

    def attempt(self, measure: Callable[..., T], /, *args, **kwargs) -> T:
        """Run one measurement; repeat it if PostgreSQL restarted or dropped us meanwhile.

        Other engineers' test suites on this machine restart PostgreSQL and terminate
        backends; a run disturbed that way measures their test, not the product.
        """
        for _ in range(3):
            started = self.pg_started()
            try:
                result = measure(*args, **kwargs)
            except psycopg.OperationalError as exc:
                log(f"PostgreSQL went away during the run ({str(exc).strip()[:80]}); repeating it")
                self.processes.stop_all()
                self.reconnect()
                self.results["disturbed_runs"] = self.results.get("disturbed_runs", 0) + 1
                continue
            if self.pg_started() == started:
                return result
            log("PostgreSQL restarted during the run; repeating it")
            self.results["disturbed_runs"] = self.results.get("disturbed_runs", 0) + 1
        raise RuntimeError("three attempts disturbed by PostgreSQL restarts; giving up on this measurement")

    # --- the data every workload starts from ------------------------------------------------

    def truncate(self) -> None:
        self.conn.execute(sql.TRUNCATE)

    def seed_due(self, *, tag: str, n: int) -> set[str]:
        """Empty tables, then n users with one event each, all due a minute ago; their idempotency keys."""
        self.truncate()
        sql.users_and_events(self.conn, tag=tag, n=n, target_sql="now() - interval '1 minute'")
        self.conn.execute("ANALYZE users_user; ANALYZE scheduling_event")
        expected = set(sql.pending_keys(self.conn))
        assert len(expected) == n, (len(expected), n)
        return expected

    def relation_sizes(self) -> dict[str, int]:
        """pg_relation_size of the events, deliveries and attempts tables and the events' indexes."""
        return dict(
            self.conn.execute("""
            SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
            WHERE c.relname IN ('scheduling_event', 'event_pending_due_idx', 'event_one_pending_per_user_type',
                                'event_history_idx', 'delivery_delivery', 'delivery_deliveryattempt')
            ORDER BY c.relname""").fetchall()
        )
