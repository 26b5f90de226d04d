"""How late each webhook arrives after its 09:00, for events falling due one by one over a window."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log
from bench.stats import median, percentile
from bench.workload import Workload


@dataclass(frozen=True)
class TimelinessSize:
    runs: int  # windows; each figure is their median
    timeliness_n: int  # events per window, each due at its own sub-second instant
    timeliness_window: int  # seconds the events' instants are spread over


SIZES = {
    "small": TimelinessSize(runs=3, timeliness_n=200, timeliness_window=20),
    "full": TimelinessSize(runs=3, timeliness_n=1_000, timeliness_window=60),
}


def timeliness_once(harness: Harness, *, n: int, window: float) -> dict:
    tag = harness.tag("time")
    harness.truncate()
    env = harness.env()
    sched = harness.processes.spawn("scheduler", ["-m", "bench.product_main", "run_scheduler"], env=env)
    worker = harness.processes.spawn("worker", ["-m", "bench.product_main", "run_worker"], env=env)
    time.sleep(6)  # both started, found nothing to do, and are idle
    if sched.poll() is not None or worker.poll() is not None:
        raise RuntimeError("scheduler or worker died while idle; see raw logs")
    lead = 5.0
    t0 = time.time() + lead
    step = window / n
    # Distinct sub-second instants: i * step plus a jitter below step (never colliding).
    target = "to_timestamp(%(t0)s + i * %(step)s + mod(i * 7919, %(jit)s) / 1000.0)"
    sql.users_and_events(
        harness.conn,
        tag=tag,
        n=n,
        target_sql=target,
        params={"t0": t0, "step": step, "jit": max(1, int(step * 1000 * 0.8))},
    )
    harness.conn.execute("ANALYZE users_user; ANALYZE scheduling_event")
    targets = sql.pending_keys(harness.conn)
    assert time.time() < t0, "building the events took longer than the lead time"
    reader = harness.receiver.reader()
    counts = reader.wait_for(set(targets), timeout=window + lead + 60)
    harness.processes.stop([sched, worker])
    arrivals = counts.pop("arrivals")
    lateness = sorted((arrivals[k] - targets[k]) * 1000 for k in arrivals)
    return {
        "n": n,
        "window_s": window,
        **counts,
        "p50_ms": percentile(lateness, percent=50),
        "p90_ms": percentile(lateness, percent=90),
        "p99_ms": percentile(lateness, percent=99),
        "max_ms": lateness[-1] if lateness else None,
        "min_ms": lateness[0] if lateness else None,
        "early": sum(1 for x in lateness if x < 0),
        "lateness_ms": [round(x, 2) for x in lateness],
    }


def measure(harness: Harness, *, size: TimelinessSize) -> dict:
    runs = []
    for i in range(size.runs):
        log(f"timeliness run {i + 1}")
        runs.append(
            harness.attempt(timeliness_once, harness, n=size.timeliness_n, window=size.timeliness_window)
        )
    return {
        "runs": runs,
        **{k: median(r[k] for r in runs) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")},
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
    }


WORKLOAD = Workload(name="timeliness", measure=measure, sizes=SIZES)
