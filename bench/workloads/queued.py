"""Webhooks already queued, sent by the worker alone: the product against `0635503` and two bare-SQL workers (issue 36).

    make bench BENCH_ARGS="--only queued"                 # 20,000 and 100,000, 1 and 2 workers, 3 rounds
    make bench BENCH_ARGS="--only queued --size small"    # 5,000 and 20,000, one round
    bench/.venv/bin/python -m bench.run --only queued --set queued_runs=1 --set queued_big=0

For each size and number of worker processes, `n` deliveries QUEUED and due (one each of
`n` PROCESSING events, seeded with SQL: bench.sql's users, events and payloads, one
destination where the schema has them, `ANALYZE`d), then the processes, timed whole from
their spawn to the last key at the receiver (the harness's nginx, `return 200` at once):

- `this`: this checkout's `manage.py run_worker` (as shipped: no flags);
- `0635503`: the same at commit 0635503 (before the fourth wave), exported with `git
  archive` into var/bench-queued/0635503 and run with this checkout's `.venv`;
- `reference`: bench/bare_worker.py `reference`, the ~100-line bare-SQL worker (psycopg 3
  + aiohttp, the same claim, batches of 100, 32 connections, no attempt rows, no leases);
- `floor`: bench/bare_worker.py `floor`, the same doing the product's own writes (one
  attempt row per request, the deliveries' update checked against the lease, the
  events' conclusion): what the guarantees cost with nothing of ours around them.

Each product has a database of its own, migrated by its own `manage.py`; the bare workers
use this checkout's. The variants take turns within each round, their order rotating
from round to round, so that a machine whose load changes weighs on all of them; the
report gives medians, ratios to `0635503` and to `reference`, and each round's own ratio.
Where the time goes: CPU seconds (user + system) of the worker processes and of their
PostgreSQL backends per delivery; commits (pg_stat_database's xact_commit of the run's
database) and statements (counted in the process: bench/counted_main.py for the products)
per claimed batch and per delivery; the load average before and after each run.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench import sql
from bench.harness import Harness, log
from bench.locations import BENCH_PY, POSTGRES, RESULTS, ROOT
from bench.products import Product
from bench.stats import median
from bench.workload import Workload


@dataclass(frozen=True)
class QueuedSize:
    queued_small: int  # deliveries queued per run, the first size
    queued_big: int  # the second size (0: the first alone)
    queued_runs: int  # rounds; every variant at every size and worker count in each


SIZES = {
    "small": QueuedSize(queued_small=5_000, queued_big=20_000, queued_runs=1),
    "full": QueuedSize(queued_small=20_000, queued_big=100_000, queued_runs=3),
}

BEFORE = "0635503"
WORKERS = (1, 2)
VARIANTS = ("this", BEFORE, "reference", "floor")
# The bare workers' shape, as issue 36 describes the reference.
BARE_BATCH, BARE_CONNECTIONS = 100, 32
SLOWEST_RATE = 100  # deliveries/s over a whole run; slower gives up


def database(label: str) -> str:
    return os.environ.get("BENCH_DATABASE_PREFIX", "bench") + "_queued_" + label.replace("-", "_")


def dsn(label: str) -> str:
    return f"{POSTGRES}/{database(label)}"


def before_checkout() -> Product:
    """Commit 0635503 exported beside this checkout (var/ is ignored), with this checkout's .venv."""
    path = ROOT / "var" / "bench-queued" / BEFORE
    if not (path / "manage.py").exists():
        path.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", BEFORE], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(path)], input=archive, check=True)
        full = subprocess.run(
            ["git", "rev-parse", BEFORE], cwd=ROOT, capture_output=True, text=True, check=True
        )
        (path / "COMMIT").write_text(full.stdout.strip()[:7] + "\n")
    venv = path / ".venv"
    if not venv.exists():
        venv.symlink_to(ROOT / ".venv")
    return Product(BEFORE, path)


def product_env(harness: Harness, *, label: str, secret_key: str) -> dict:
    return harness.env(
        DATABASE_URL=dsn(label),
        DJANGO_SECRET_KEY=secret_key,
        LOG_LEVEL="WARNING",
    )


def prepare(harness: Harness, product: Product, *, secret_key: str) -> None:
    admin = sql.connect(f"{POSTGRES}/postgres")
    admin.execute(f"DROP DATABASE IF EXISTS {database(product.label)} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {database(product.label)}")
    admin.close()
    migrated = subprocess.run(
        [product.python, "manage.py", "migrate", "--noinput"],
        cwd=product.path,
        env=product_env(harness, label=product.label, secret_key=secret_key),
        capture_output=True,
        text=True,
    )
    if migrated.returncode:
        raise RuntimeError(f"migrate failed in {product.path}:\n{migrated.stdout}{migrated.stderr}")
    # Every checkout's bytecode cached before its first timed run, as a deployment's is.
    subprocess.run(
        [product.python, "-m", "compileall", "-q", "-x", r"/(\.venv|var|node_modules)/", "."],
        cwd=product.path,
        capture_output=True,
        check=True,
    )


def drop(label: str) -> None:
    admin = sql.connect(f"{POSTGRES}/postgres")
    admin.execute(f"DROP DATABASE IF EXISTS {database(label)} WITH (FORCE)")
    admin.close()


# Deliveries as the product's claim of events writes them, one per event, to the one destination where
# the schema has destinations ({destination}: its column and value, or nothing).
DELIVERIES = """
INSERT INTO delivery_delivery (id, event_id, idempotency_key, {endpoint_column}, payload, status, attempts,
    max_attempts, next_attempt_at, locked_until, locked_by, attempt_started_at, last_status_code,
    last_error, delivered_at, created_at, updated_at{destination_column})
SELECT md5(%(tag)s || ':d:' || i)::uuid, {eid}, 'bench-' || substr(md5(%(tag)s || ':k:' || i), 1, 24),
       %(endpoint)s, {payload}, 'QUEUED', 0, 8, now(), NULL, '', NULL, NULL, '', NULL, now(), now(){destination_value}
FROM generate_series(%(lo)s::int, %(hi)s::int) AS i
"""


def seed(conn, *, tag: str, n: int, url: str, stored: dict[str, str]) -> set[str]:
    """Empty tables, then n PROCESSING events each with one QUEUED delivery due now; their keys.

    `stored`: `url` as a product that keeps receiver URLs encrypted stores it (Harness.receiver_columns);
    a schema from before that (0635503) gets the URL itself.
    """
    tables = [
        "users_user",
        "scheduling_event",
        "delivery_delivery",
        "delivery_deliveryattempt",
        "delivery_endpoint",
    ]
    has_destinations = conn.execute("SELECT to_regclass('delivery_destination')").fetchone()[0] is not None
    if has_destinations:
        tables.append("delivery_destination")
    conn.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
    keyed = (
        conn.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'delivery_delivery' AND column_name = 'endpoint_key'"
        ).fetchone()
        is not None
    )
    column = value = ""
    if keyed:
        sql.destinations(conn, columns=[stored])
    elif has_destinations:
        conn.execute(
            """INSERT INTO delivery_destination (name, url, event_types, format, enabled, created_by, updated_by,
                   created_at, updated_at, version)
               VALUES ('bench-1', %s, '{}', 'standard', true, 'bench', 'bench', now(), now(), 1)""",
            [url],
        )
    if has_destinations:
        (destination_id,) = conn.execute("SELECT id FROM delivery_destination").fetchone()
        column, value = ", destination_id", f", {int(destination_id)}"
    sql.users_and_events(conn, tag=tag, n=n, target_sql="now() - interval '1 minute'", status="PROCESSING")
    statement = sql.fmt(
        DELIVERIES.replace("{destination_column}", column)
        .replace("{destination_value}", value)
        .replace("{endpoint_column}", "endpoint_key" if keyed else "endpoint_url")
    )
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute(
            statement, {"tag": tag, "lo": 1, "hi": n, "endpoint": stored["url_key"] if keyed else url}
        )
    conn.execute("ANALYZE users_user; ANALYZE scheduling_event; ANALYZE delivery_delivery")
    keys = {k for (k,) in conn.execute("SELECT idempotency_key FROM delivery_delivery").fetchall()}
    assert len(keys) == n, (len(keys), n)
    return keys


def table_writes(conn) -> dict[str, tuple[int, int]]:
    """Each user table's (rows written: inserted + updated + deleted, of those updates the HOT ones), as counted so far.

    The counters reach pg_stat_user_tables when each backend flushes them (at most once a second,
    or when it goes idle or exits): this connection's own pending counts are flushed first, and the
    caller waits for the workers' backends to be gone before reading after a run.
    """
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {
        name: (written, hot)
        for name, written, hot in conn.execute(
            "SELECT relname, n_tup_ins + n_tup_upd + n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables"
        ).fetchall()
    }


def wal_start(conn) -> str:
    """A CHECKPOINT (so that no full-page image of before the run is pending), then the WAL's position."""
    conn.execute("CHECKPOINT")
    return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def wal_written(conn, start: str) -> tuple[int, int | None]:
    """WAL bytes since `start`, and the index entries among them (B-tree leaf inserts, from pg_walinspect).

    Cluster-wide: whatever else the server writes meanwhile is counted too (the run's report says
    whether the machine was shared). The index entries are None where pg_walinspect cannot read the
    range (the extension missing, or a segment recycled by a checkpoint during the run).
    """
    end = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
    written = conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint", [end, start]).fetchone()[
        0
    ]
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        (entries,) = conn.execute(
            "SELECT coalesce(sum(count), 0)::bigint FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, true) "
            "WHERE \"resource_manager/record_type\" IN ('Btree/INSERT_LEAF', 'Btree/INSERT_POST')",
            [start, end],
        ).fetchone()
    except Exception as error:  # noqa: BLE001 - a figure missing, not a run failed
        log(f"queued: index entries not read ({error})")
        return written, None
    return written, entries


def commits(conn, label: str) -> int:
    return conn.execute(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [database(label)]
    ).fetchone()[0]


def backends_cpu(label: str) -> float:
    """User + system CPU seconds of the PostgreSQL backends connected to the variant's database now."""
    total = 0.0
    marker = f" {database(label)} "
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if cmd.startswith("postgres: ") and marker in cmd + " ":
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            continue
    return total


def run_once(
    harness: Harness, *, variant: str, product: Product | None, n: int, workers: int, env: dict
) -> dict:
    """n deliveries queued, `workers` processes of the variant from spawn to the last key at the receiver."""
    label = product.label if product else "this"
    conn = sql.connect(dsn(label))
    try:
        url = harness.receiver.url
        # Keyed and encrypted under the secret key of the processes that read them (`env`'s; the bare
        # workers, which have none, read neither).
        stored = (harness.probe("receiver_columns", url, env=env) if env else harness.receiver_columns(url))[
            url
        ]
        expected = seed(conn, tag=harness.tag(f"q{variant}-"), n=n, url=url, stored=stored)
        counts_dir = Path(tempfile.mkdtemp(prefix="bench-queued-"))
        reader = harness.receiver.reader()
        reader.poll()
        reader.rows.clear()
        reader.request_times.clear()
        time.sleep(1.2)  # the seeding's transactions flushed to pg_stat_database before the first count
        commits_before = commits(conn, label)
        wal_before = wal_start(conn)
        writes_before = table_writes(conn)
        load_before = os.getloadavg()
        started = time.time()
        if product is not None:
            procs = [
                harness.processes.spawn(
                    f"queued-{variant}",
                    [str(ROOT / "bench" / "counted_main.py"), "run_worker"],
                    env={**env, "BENCH_COUNTS_DIR": str(counts_dir)},
                    python=product.python,
                    cwd=product.path,
                )
                for _ in range(workers)
            ]
        else:
            procs = [
                subprocess.Popen(
                    [
                        BENCH_PY,
                        "-m",
                        "bench.bare_worker",
                        variant,
                        dsn(label),
                        f"bare{i}",
                        url,
                        str(BARE_BATCH),
                        str(BARE_CONNECTIONS),
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for i in range(workers)
            ]
        ps = [psutil.Process(p.pid) for p in procs]
        cpu: dict[int, float] = {}
        pg_cpu = 0.0

        def on_tick(seen: int) -> None:
            nonlocal pg_cpu
            for p in ps:
                try:
                    t = p.cpu_times()
                    cpu[p.pid] = t.user + t.system
                except psutil.Error:
                    pass
            pg_cpu = max(pg_cpu, backends_cpu(label))
            if product is not None and any(p.poll() is not None for p in procs):
                raise RuntimeError(
                    f"a {variant} worker exited during the run; see bench/results/raw/queued-{variant}.log"
                )

        try:
            counts = reader.wait_for(expected, timeout=n / SLOWEST_RATE + 60, on_tick=on_tick)
            on_tick(0)
        finally:
            outputs = []
            if product is not None:
                harness.processes.stop(procs)
            else:
                for p in procs:
                    try:
                        out, err = p.communicate(timeout=30)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        out, err = p.communicate()
                    if p.returncode:
                        raise RuntimeError(f"bare_worker {variant} failed ({p.returncode}):\n{err[-2000:]}")
                    outputs.append(json.loads(out.strip().splitlines()[-1]))
        load_after = os.getloadavg()
        time.sleep(1.2)  # the backends' last transactions flushed to pg_stat_database
        committed = commits(conn, label) - commits_before - 1  # less this count's own
        # Before any other statement of this connection: the workers have exited, so their
        # backends' counts are flushed (the sleep above), and nothing else of the run writes.
        wal_bytes, index_entries = wal_written(conn, wal_before)
        writes_after = table_writes(conn)
        written = {
            name: (
                after[0] - writes_before.get(name, (0, 0))[0],
                after[1] - writes_before.get(name, (0, 0))[1],
            )
            for name, after in writes_after.items()
        }
        if product is not None:
            statements = [json.loads(f.read_text()) for f in counts_dir.glob("*.json")]
        else:
            statements = [
                {"statements": o["statements"], "claims": o["batches"], "claimed": o["delivered"]}
                for o in outputs
            ]
        shutil.rmtree(counts_dir, ignore_errors=True)
        not_delivered = conn.execute(
            "SELECT count(*) FILTER (WHERE status <> 'DELIVERED') FROM delivery_delivery"
        ).fetchone()[0]
        events_open = conn.execute(
            "SELECT count(*) FILTER (WHERE status = 'PROCESSING') FROM scheduling_event"
        ).fetchone()[0]
        attempts = conn.execute("SELECT count(*) FROM delivery_deliveryattempt").fetchone()[0]
    finally:
        conn.close()
    counts.pop("arrivals")
    seconds = (counts["last_arrival"] or time.time()) - started
    delivered = counts["unique"]
    worker_cpu = sum(cpu.values())
    n_statements = sum(s["statements"] for s in statements) if len(statements) == workers else None
    claims = sum(s["claims"] for s in statements) if len(statements) == workers else None
    return {
        "variant": variant,
        "n": n,
        "workers": workers,
        "seconds": seconds,
        "rate": delivered / seconds,
        "steady_rate": (delivered - 1) / (counts["last_arrival"] - counts["first_arrival"])
        if delivered > 1 and counts["last_arrival"] > counts["first_arrival"]
        else None,
        "to_first_s": counts["first_arrival"] - started if counts["first_arrival"] else None,
        "cpu_s": worker_cpu,
        "cpu_ms_per_delivery": 1000 * worker_cpu / delivered if delivered else None,
        "pg_cpu_s": pg_cpu,
        "pg_cpu_ms_per_delivery": 1000 * pg_cpu / delivered if delivered else None,
        "commits": committed,
        "statements": n_statements,
        "batches": claims,
        "commits_per_batch": committed / claims if claims else None,
        "statements_per_batch": n_statements / claims if claims and n_statements is not None else None,
        "commits_per_delivery": committed / delivered if delivered else None,
        "claimed_per_batch": sum(s["claimed"] for s in statements) / claims if claims else None,
        "statements_per_delivery": n_statements / delivered
        if delivered and n_statements is not None
        else None,
        "not_delivered": not_delivered,
        "events_processing": events_open,
        "attempt_rows": attempts,
        "wal_bytes": wal_bytes,
        "wal_bytes_per_delivery": wal_bytes / delivered if delivered else None,
        "rows_written": sum(w for w, _ in written.values()),
        "rows_per_delivery": sum(w for w, _ in written.values()) / delivered if delivered else None,
        "rows_by_table": {name: w for name, (w, _) in written.items() if w},
        "hot_updates": sum(h for _, h in written.values()),
        "index_entries": index_entries,
        "index_entries_per_delivery": index_entries / delivered
        if delivered and index_entries is not None
        else None,
        "load_before": load_before,
        "load_after": load_after,
        **counts,
    }


def measure(harness: Harness, *, size: QueuedSize) -> dict:
    sizes = [s for s in (size.queued_small, size.queued_big) if s]
    this = Product("this", ROOT)
    before = before_checkout()
    secret_key = secrets.token_urlsafe(50)
    products = {"this": this, BEFORE: before}
    for product in products.values():
        prepare(harness, product, secret_key=secret_key)
    envs = {label: product_env(harness, label=label, secret_key=secret_key) for label in products}
    runs: list[dict] = []
    try:
        for round_ in range(size.queued_runs):
            for n in sizes:
                for workers in WORKERS:
                    shift = round_ % len(VARIANTS)
                    for variant in VARIANTS[shift:] + VARIANTS[:shift]:
                        product = products.get(variant)
                        log(
                            f"queued: {n:,} queued, {workers} x {variant} (round {round_ + 1}/{size.queued_runs}); "
                            f"load {os.getloadavg()[0]:.1f}"
                        )
                        run = harness.attempt(
                            run_once,
                            harness,
                            variant=variant,
                            product=product,
                            n=n,
                            workers=workers,
                            env=envs.get(variant, {}),
                        )
                        run["round"] = round_ + 1
                        runs.append(run)
                        log(
                            f"queued: {variant} {workers}w {n:,}: {run['rate']:,.0f}/s ({run['seconds']:.1f} s), CPU "
                            f"{run['cpu_ms_per_delivery'] or 0:.3f} + PG {run['pg_cpu_ms_per_delivery'] or 0:.3f} ms/delivery, "
                            f"{run['statements_per_batch'] or 0:.1f} statements and {run['commits_per_batch'] or 0:.1f} "
                            f"commits per batch, missing {run['missing']}, twice {run['duplicates']}, not DELIVERED "
                            f"{run['not_delivered']}; load {run['load_after'][0]:.1f}"
                        )
                        harness.results["queued_partial"] = runs
                        harness.save()
    finally:
        for label in products:
            drop(label)
    harness.results.pop("queued_partial", None)
    results = {
        "sizes": sizes,
        "workers": list(WORKERS),
        "variants": list(VARIANTS),
        # The export sits inside this checkout (var/): git there would name this checkout's HEAD.
        "commits": {"this": this.commit(), BEFORE: (before.path / "COMMIT").read_text().strip()},
        "runs": runs,
        "summary": summarize(runs),
        "command": harness.results.get("command"),
        "machine": harness.results.get("machine"),
    }
    (RESULTS / "queued.json").write_text(json.dumps(results, indent=1, default=str))
    (RESULTS / "REPORT-queued.md").write_text("\n".join(report_lines(results)) + "\n")
    return results


def summarize(runs: list[dict]) -> dict:
    summary = {}
    keys = sorted({(r["n"], r["workers"]) for r in runs})
    for n, workers in keys:
        cell = {}
        for variant in VARIANTS:
            mine = [r for r in runs if r["n"] == n and r["workers"] == workers and r["variant"] == variant]
            if not mine:
                continue

            def med(key, mine=mine):
                values = [r[key] for r in mine if r[key] is not None]
                return median(values) if values else None

            cell[variant] = {
                "runs": len(mine),
                "rate": med("rate"),
                "rates": [r["rate"] for r in mine],
                "seconds": med("seconds"),
                "steady_rate": med("steady_rate"),
                "to_first_s": med("to_first_s"),
                "cpu_ms_per_delivery": med("cpu_ms_per_delivery"),
                "pg_cpu_ms_per_delivery": med("pg_cpu_ms_per_delivery"),
                "statements_per_batch": med("statements_per_batch"),
                "commits_per_batch": med("commits_per_batch"),
                "statements_per_delivery": med("statements_per_delivery"),
                "commits_per_delivery": med("commits_per_delivery"),
                "rows_per_delivery": med("rows_per_delivery"),
                "wal_bytes_per_delivery": med("wal_bytes_per_delivery"),
                "index_entries_per_delivery": med("index_entries_per_delivery"),
                "delivered_per_batch": median(
                    [r["claimed_per_batch"] for r in mine if r.get("claimed_per_batch")]
                )
                if any(r.get("claimed_per_batch") for r in mine)
                else None,
                "missing": sum(r["missing"] for r in mine),
                "duplicates": sum(r["duplicates"] for r in mine),
                "not_delivered": sum(r["not_delivered"] for r in mine),
                "load": [min(r["load_before"][0] for r in mine), max(r["load_after"][0] for r in mine)],
            }
        for variant, s in cell.items():
            for base in (BEFORE, "reference"):
                b = cell.get(base)
                s[f"ratio_{base}"] = s["rate"] / b["rate"] if b and b["rate"] else None
                # Each round's own pair: the two ran minutes apart under about the same load.
                pairs = [
                    (r["rate"] / o["rate"])
                    for r in runs
                    if r["n"] == n and r["workers"] == workers and r["variant"] == variant
                    for o in runs
                    if o["n"] == n
                    and o["workers"] == workers
                    and o["variant"] == base
                    and o["round"] == r["round"]
                ]
                s[f"ratios_{base}_by_round"] = pairs
        summary[f"{n} {workers}"] = {"n": n, "workers": workers, "variants": cell}
    return summary


def report_lines(w: dict) -> list[str]:
    lines = ["## Queued: the worker alone on webhooks already queued (issue 36)\n"]
    lines.append(
        f"Deliveries QUEUED and due at once (one per PROCESSING event, one destination), then the worker processes, "
        f"timed whole from their spawn to the last key at the bench's nginx (`return 200`). `this` = "
        f"`{w['commits']['this']}`, `{BEFORE}` = `{w['commits'][BEFORE]}` (before the fourth wave), both `run_worker` "
        f"as shipped; `reference` = bench/bare_worker.py reference (psycopg 3 + aiohttp, the same claim, batches of "
        f"{BARE_BATCH}, {BARE_CONNECTIONS} connections, no attempt rows, no leases); `floor` = bench/bare_worker.py "
        "floor (the same plus the product's own writes: an attempt row per request, the lease-checked delivery "
        "update, the events' conclusion). Variants in turn within each round, the order rotating; medians. *CPU* = "
        "user + system of the worker processes / deliveries; *PG CPU* = the same of their PostgreSQL backends; "
        "*stmts* and *commits* per claimed batch (statements counted in each process, commits from "
        "pg_stat_database); *rows*, *WAL bytes* and *index entries* per delivery from the server's counters "
        "(pg_stat_user_tables' inserts + updates + deletes of the run's database; pg_current_wal_lsn() around the "
        "run, a CHECKPOINT before; B-tree leaf inserts in that WAL, by pg_walinspect). Load = the 1-minute load average before the first and after the last run of the cell.\n"
    )
    lines.append(
        "| queued | workers | variant | deliveries/s (runs) | x 0635503 (by round) | x reference (by round) "
        "| CPU ms/delivery | PG CPU ms/delivery | stmts / batch | commits / batch | stmts / delivery "
        "| rows / delivery | WAL bytes / delivery | index entries / delivery "
        "| missing / twice / not DELIVERED | load |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")

    def fx(x, pattern="{:.2f}"):
        return pattern.format(x) if x is not None else "-"

    for cell in w["summary"].values():
        for variant, s in cell["variants"].items():
            rates = ", ".join(f"{x:,.0f}" for x in s["rates"])
            by_before = ", ".join(f"{x:.2f}" for x in s[f"ratios_{BEFORE}_by_round"])
            by_ref = ", ".join(f"{x:.2f}" for x in s["ratios_reference_by_round"])
            lines.append(
                f"| {cell['n']:,} | {cell['workers']} | {variant} | **{s['rate']:,.0f}** ({rates}) "
                f"| {fx(s[f'ratio_{BEFORE}'])} ({by_before}) | {fx(s['ratio_reference'])} ({by_ref}) "
                f"| {fx(s['cpu_ms_per_delivery'], '{:.3f}')} | {fx(s['pg_cpu_ms_per_delivery'], '{:.3f}')} "
                f"| {fx(s['statements_per_batch'], '{:.1f}')} | {fx(s['commits_per_batch'], '{:.1f}')} "
                f"| {fx(s['statements_per_delivery'], '{:.3f}')} "
                f"| {fx(s.get('rows_per_delivery'))} | {fx(s.get('wal_bytes_per_delivery'), '{:,.0f}')} "
                f"| {fx(s.get('index_entries_per_delivery'))} "
                f"| {s['missing']} / {s['duplicates']} / {s['not_delivered']} | {s['load'][0]:.1f}-{s['load'][1]:.1f} |"
            )
    return lines


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["queued"]`)."""
    w = res.get("queued")
    if w is None:
        return ["## Queued: the worker alone on webhooks already queued (issue 36)\n", "_queued: not run._"]
    if "error" in w:
        return ["## Queued (issue 36)\n", f"_queued failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    return report_lines(w)


WORKLOAD = Workload(name="queued", measure=measure, sizes=SIZES)
