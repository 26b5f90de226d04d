"""One worker sending `endurance_n` queued deliveries in one run; its memory and rate along the way."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from bench import sql
from bench.harness import Harness, log
from bench.processes import RssSampler
from bench.workload import Workload


@dataclass(frozen=True)
class EnduranceSize:
    # Deliveries queued at the start; at full size the workload raises it from the burst's
    # one-worker rate (up to the 500,000) and records it.
    endurance_n: int
    endurance_first: int  # deliveries after which the worker's memory is the baseline of its growth


SIZES = {
    "small": EnduranceSize(endurance_n=12_000, endurance_first=2_000),
    "full": EnduranceSize(endurance_n=200_000, endurance_first=20_000),
}


def measure(harness: Harness, *, size: EnduranceSize) -> dict:
    # The 500,000 when one worker can send them in ~5.5 min (judged from the
    # burst's 1-worker steady rate, which shares the CPU with a scheduler), else less,
    # down to the 200,000 the issue allows.
    one = [
        v
        for v in harness.results.get("burst", {}).get("summary", {}).values()
        if v["workers"] == 1 and v["receiver"] == "0ms" and v.get("steady_rate")
    ]
    if one and harness.size == "full":
        rate = max(v["steady_rate"] for v in one) * 1.3
        size = replace(size, endurance_n=int(min(500_000, max(200_000, rate * 330 // 100_000 * 100_000))))
        harness.sizes_decided(endurance_n=size.endurance_n)
    n = size.endurance_n
    first = size.endurance_first
    tag = harness.tag("endure")
    harness.truncate()
    log(f"endurance: building {n:,} queued deliveries")
    sql.users_and_events(
        harness.conn, tag=tag, n=n, target_sql="now() - interval '1 minute'", status="PROCESSING"
    )
    sql.deliveries(harness.conn, tag=tag, n=n, key=harness.receiver_key(harness.receiver.url))
    harness.conn.execute("VACUUM ANALYZE users_user, scheduling_event, delivery_delivery")
    expected = {
        k for (k,) in harness.conn.execute("SELECT idempotency_key FROM delivery_delivery").fetchall()
    }
    concurrency = harness.results.get("burst", {}).get("endurance_concurrency", 8)
    env = harness.env()
    reader = harness.receiver.reader()
    started = time.time()
    worker = harness.processes.spawn(
        "worker", ["-m", "bench.product_main", "run_worker", "--concurrency", str(concurrency)], env=env
    )
    series = []
    state = {"seen": 0}

    def on_sample(ts, sample):
        series.append(
            {"t": ts - started, "rss_mb": sample.get("worker", 0) / 2**20, "delivered": state["seen"]}
        )

    sampler = RssSampler({"worker": worker.pid}, every=1.0, on_sample=on_sample)
    sampler.start()

    def on_tick(seen):
        state["seen"] = seen

    pg_started = harness.pg_started()
    counts = reader.wait_for(expected, timeout=min(n / 100 + 300, 1200), on_tick=on_tick, tick=0.5)
    restarted = harness.pg_started() != pg_started
    sampler.finish()
    harness.processes.stop([worker])
    counts.pop("arrivals")
    seconds = (counts["last_arrival"] or time.time()) - started
    after_first = next((s["rss_mb"] for s in series if s["delivered"] >= first), None)
    at_end = next((s["rss_mb"] for s in reversed(series) if s["rss_mb"]), None)
    # Throughput per window of 10 % of the run.
    windows = []
    done = [s for s in series if s["delivered"] > 0]
    if done:
        t_first, t_last = done[0]["t"], done[-1]["t"]
        span = (t_last - t_first) / 10 or 1
        for k in range(10):
            a, b = t_first + k * span, t_first + (k + 1) * span
            pts = [s for s in series if a <= s["t"] <= b]
            if len(pts) >= 2:
                windows.append((pts[-1]["delivered"] - pts[0]["delivered"]) / (pts[-1]["t"] - pts[0]["t"]))
    return {
        "n": n,
        "concurrency": concurrency,
        "seconds": seconds,
        "rate": counts["unique"] / seconds,
        **counts,
        "rss_after_first_mb": after_first,
        "rss_end_mb": at_end,
        "first": first,
        "rss_growth": (at_end / after_first - 1) if after_first and at_end else None,
        "window_rates": windows,
        "series": series,
        "postgres_restarted_during_run": restarted,
    }


WORKLOAD = Workload(name="endurance", measure=measure, sizes=SIZES)
