"""The scheduler's claim on a table of `scale_events` events (ten per recipient, 1 % due).

EXPLAIN and timed claim batches (bench/probe_claim.py), `run_scheduler --once` over the due
events from process start, a profiled pass, and the claim's floor: the same rows written by
PostgreSQL alone (sql.CLAIM_FLOOR), on one connection and on two at once.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log, process_failure
from bench.locations import PRODUCT_DSN, RAW
from bench.profiling import py_spy_record, top_functions
from bench.stats import median
from bench.workload import Workload


@dataclass(frozen=True)
class ScaleSize:
    scale_events: int  # events in the table: a tenth as many recipients, a hundredth due


SIZES = {"small": ScaleSize(scale_events=300_000), "full": ScaleSize(scale_events=10_000_000)}


def measure(harness: Harness, *, size: ScaleSize) -> dict:
    total = size.scale_events
    users = total // 10
    due = total // 100
    harness.truncate()
    log(f"scale: building {total:,} events over {users:,} users ({due:,} due)")
    started = time.monotonic()
    conn = harness.conn
    sql.yearly_history(conn, users=users, due=due)
    built = time.monotonic()
    log(f"scale: built in {built - started:.0f} s; VACUUM ANALYZE")
    conn.execute("VACUUM ANALYZE users_user")
    conn.execute("VACUUM ANALYZE scheduling_event")
    vacuumed = time.monotonic()
    counts = dict(conn.execute("SELECT status, count(*) FROM scheduling_event GROUP BY status").fetchall())
    sizes = dict(
        conn.execute("""
        SELECT c.relname, pg_relation_size(c.oid) FROM pg_class c
        WHERE c.relname IN ('scheduling_event', 'event_pending_due_idx', 'event_history_idx',
                            'scheduling_event_pkey', 'users_user')""").fetchall()
    )
    # The nine past years stay: this workload measures the claim, and run_scheduler --once
    # would otherwise spend part of each run pruning them (the retention workload measures that).
    env = harness.env(HISTORY_RETENTION="36500d")
    log("scale: EXPLAIN and timed claims")
    probe = harness.probe("probe_claim", "1000", "7", env=env)
    floor = claim_floor(harness)
    remaining = conn.execute(
        "SELECT count(*) FROM scheduling_event WHERE status = 'PENDING' AND target_timestamp_utc <= now()"
    ).fetchone()[0]
    log(f"scale: run_scheduler --once over {remaining:,} due events")
    t = time.monotonic()
    spawned = time.time()
    r = harness.manage("run_scheduler", "--once", env=env)
    sched_seconds = time.monotonic() - t
    if r.returncode:
        raise process_failure(output=r.stderr, shown=r.stdout + r.stderr)
    queued = conn.execute("SELECT count(*) FROM delivery_delivery").fetchone()[0]
    # Due -> queued: from the spawn to the last delivery's created_at (the
    # scheduler's clock, this machine's); the command's exit comes after its
    # repair and prune passes.
    last_queued = conn.execute(
        "SELECT extract(epoch FROM max(created_at)) FROM delivery_delivery"
    ).fetchone()[0]
    queued_seconds = float(last_queued) - spawned
    left = conn.execute(
        "SELECT count(*) FROM scheduling_event WHERE status = 'PENDING' AND target_timestamp_utc <= now()"
    ).fetchone()[0]
    # The same command with no work: Django's start-up and the scheduler's fixed costs.
    t = time.monotonic()
    harness.manage("run_scheduler", "--once", env=env)
    idle_seconds = time.monotonic() - t
    claimed = remaining - left
    # A second, profiled pass on 20,000 freshly due events in the same big table.
    extra = min(20_000, due)
    sql.users_and_events(
        conn, tag=harness.tag("scale-prof"), n=extra, target_sql="now() - interval '1 minute'"
    )
    conn.execute("ANALYZE scheduling_event")
    log(f"scale: profiled run_scheduler --once over {extra:,} more due events")
    t = time.monotonic()
    p = harness.processes.spawn("scheduler", ["-m", "bench.product_main", "run_scheduler", "--once"], env=env)
    prof = py_spy_record(p.pid, seconds=0, out=RAW / "profile-scale-scheduler.txt")
    p.wait()
    prof.wait()
    profiled_seconds = time.monotonic() - t
    harness.results.setdefault("profiles_extra", {})["scale-scheduler"] = top_functions(
        RAW / "profile-scale-scheduler.txt"
    )
    return {
        "profiled_pass": {"events": extra, "seconds": profiled_seconds},
        "events": total,
        "users": users,
        "due": due,
        "status_counts": counts,
        "sizes_bytes": sizes,
        "build_s": built - started,
        "vacuum_analyze_s": vacuumed - built,
        "claim_function": probe["function"],
        "claim_statements": probe["statements"],
        "explain": probe["explain"],
        "claim_sql": probe["sql"],
        "claim_ms": probe["ms"],
        "claim_ms_median": median(
            [ms for ms, c in zip(probe["ms"], probe["claimed"], strict=True) if c == 1000] or probe["ms"]
        ),
        "exec_ms": probe["exec_ms"],
        "exec_ms_median": median(probe["exec_ms"]),
        "claimed_per_call": probe["claimed"],
        "sql_ms": probe["sql_ms"],
        "sql_ms_median": median(probe["sql_ms"]),
        "sql_rows": probe["sql_rows"],
        "scheduler_once_s": sched_seconds,
        "scheduler_idle_once_s": idle_seconds,
        "scheduler_claimed": claimed,
        "deliveries_total": queued,
        "scheduler_rate": claimed / sched_seconds,
        "scheduler_queued_s": queued_seconds,
        "scheduler_queued_rate": claimed / queued_seconds,
        "scheduler_rate_excl_startup": claimed / max(0.001, sched_seconds - idle_seconds),
        "uses_partial_index": "event_pending_due_idx" in probe["explain"],
        "floor": floor,
    }


def claim_floor(harness: Harness, *, batch: int = 1000, calls: int = 7, per_connection: int = 10) -> dict:
    """The claim's writes made by PostgreSQL alone (bench.sql.CLAIM_FLOOR), on the same table.

    First `calls` batches one after the other on one connection (the
    floor under the whole claim batch), then `per_connection` batches on
    each of two connections at once (the floor under the scheduler's
    events/s on this machine's two cores, with no Python at all).
    """
    log("scale: the same writes by PostgreSQL alone (claim floor)")
    key = harness.receiver_key(harness.receiver.url)
    one = [sql.claim_floor(harness.conn, batch=batch, key=key) for _ in range(calls)]
    connections = [sql.connect(PRODUCT_DSN) for _ in range(2)]
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            started = time.perf_counter()
            done = list(
                pool.map(
                    lambda c: [sql.claim_floor(c, batch=batch, key=key) for _ in range(per_connection)],
                    connections,
                )
            )
            wall = time.perf_counter() - started
    finally:
        for c in connections:
            c.close()
    claimed_two = sum(n for batches in done for _, n in batches)
    return {
        "batch": batch,
        "one_ms": [ms for ms, _ in one],
        "one_claimed": [n for _, n in one],
        "one_ms_median": median([ms for ms, n in one if n == batch] or [ms for ms, _ in one]),
        "two_claimed": claimed_two,
        "two_s": wall,
        "two_rate": claimed_two / wall,
    }


WORKLOAD = Workload(name="scale", measure=measure, sizes=SIZES, repeat_whole=True)
