"""Every event due at once, the product's scheduler and workers sending them to nginx.

A matrix of one and two workers at concurrency 1 and 8 against the 0 ms receiver, and 8 and
32 against the 50 ms one; then the best two-worker configuration at the issue's size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.harness import Harness, log
from bench.locations import RAW
from bench.processes import RssSampler
from bench.profiling import py_spy_record
from bench.stats import median, steady_rate
from bench.workload import Workload


@dataclass(frozen=True)
class BurstSize:
    runs: int  # rounds of the matrix; each figure is their median
    burst_n: int  # events per run of the matrix at 0 ms
    burst_big_n: int  # events at the size, best two-worker configuration only
    burst_slow_n: int  # events per run against the 50 ms receiver
    # Runs at burst_big_n: the workload runs three when they fit its time budget, and records it.
    big_runs: int


SIZES = {
    "small": BurstSize(runs=3, burst_n=2000, burst_big_n=4000, burst_slow_n=300, big_runs=1),
    "full": BurstSize(runs=3, burst_n=10_000, burst_big_n=100_000, burst_slow_n=1_000, big_runs=1),
}


def burst_once(
    harness: Harness, *, n: int, workers: int, concurrency: int, slow: bool, profile: float = 0
) -> dict:
    expected = harness.seed_due(tag=harness.tag("burst"), n=n)
    url = harness.receiver.url_slow if slow else harness.receiver.url
    env = harness.env(WEBHOOK_URL=url)
    reader = harness.receiver.reader()
    started = time.time()
    sched = harness.processes.spawn("scheduler", ["-m", "bench.product_main", "run_scheduler"], env=env)
    ws = [
        harness.processes.spawn(
            "worker", ["-m", "bench.product_main", "run_worker", "--concurrency", str(concurrency)], env=env
        )
        for _ in range(workers)
    ]
    names = {"scheduler": sched.pid, **{f"worker{i + 1}": w.pid for i, w in enumerate(ws)}}
    sampler = RssSampler(names)
    sampler.start()
    profilers = []
    if profile:
        time.sleep(1.5)  # past Django's start-up, into the steady state
        for name, pid in names.items():
            profilers.append(py_spy_record(pid, seconds=profile, out=RAW / f"profile-burst-{name}.txt"))
    counts = reader.wait_for(expected, timeout=min(n / 15 + 120, 900))
    for p in profilers:
        p.wait()
    peak = sampler.finish()
    harness.processes.stop([sched, *ws])
    counts.pop("arrivals")
    seconds = (counts["last_arrival"] or time.time()) - started
    return {
        "n": n,
        "workers": workers,
        "concurrency": concurrency,
        "receiver": "50ms" if slow else "0ms",
        "seconds": seconds,
        "rate": counts["unique"] / seconds,
        "steady_rate": steady_rate(counts),
        "peak_rss_mb": peak,
        **counts,
    }


def measure(harness: Harness, *, size: BurstSize) -> dict:
    configs = [
        # (n, workers, concurrency, slow receiver)
        *[(size.burst_n, w, c, False) for w in (1, 2) for c in (1, 8)],
        *[(size.burst_slow_n, w, c, True) for w, c in ((1, 8), (2, 8), (1, 32), (2, 32))],
    ]
    runs: dict[str, list] = {}
    for _ in range(size.runs):
        for n, w, c, slow in configs:
            key = f"{n} events, {w} worker(s) x concurrency {c}, {'50 ms' if slow else '0 ms'} receiver"
            log(f"burst: {key}")
            runs.setdefault(key, []).append(
                harness.attempt(burst_once, harness, n=n, workers=w, concurrency=c, slow=slow)
            )
    summary = {key: summarize_burst(rs) for key, rs in runs.items()}
    zero = {k: v for k, v in summary.items() if "0 ms" in k and "50 ms" not in k}
    best_key = max(zero, key=lambda k: zero[k]["steady_rate"] or 0)
    # The size, in the target's configuration (1 scheduler + 2 workers), at the
    # concurrency that was best for two workers in the matrix.
    two = {k: v for k, v in zero.items() if v["workers"] == 2}
    big_from = max(two, key=lambda k: two[k]["steady_rate"] or 0)
    best = next(rs[0] for k, rs in runs.items() if k == big_from)
    big_key = f"{size.burst_big_n} events, {best['workers']} worker(s) x concurrency {best['concurrency']}, 0 ms receiver"
    big_runs = []
    # Three runs at the size when they fit the time budget (~5.5 min), else one.
    rate = summary[big_from]["steady_rate"] or 1
    big_run_count = 3 if 3 * (size.burst_big_n / rate + 6) <= 330 else 1
    harness.sizes_decided(big_runs=big_run_count)
    for _ in range(big_run_count):
        log(f"burst: {big_key}")
        big_runs.append(
            harness.attempt(
                burst_once,
                harness,
                n=size.burst_big_n,
                workers=best["workers"],
                concurrency=best["concurrency"],
                slow=False,
            )
        )
    runs[big_key] = big_runs
    summary[big_key] = summarize_burst(big_runs)
    # The endurance workload's one worker runs at the matrix's best concurrency when one worker was best, else 8.
    best_in_matrix = runs[best_key][0]
    return {
        "runs": runs,
        "summary": summary,
        "best_matrix": best_key,
        "big_from": big_from,
        "big": big_key,
        "endurance_concurrency": best_in_matrix["concurrency"] if best_in_matrix["workers"] == 1 else 8,
    }


def summarize_burst(runs: list[dict]) -> dict:
    return {
        "seconds": median(r["seconds"] for r in runs),
        "rate": median(r["rate"] for r in runs),
        "rates": [r["rate"] for r in runs],
        "steady_rate": median(r["steady_rate"] for r in runs),
        "steady_rates": [r["steady_rate"] for r in runs],
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "non_200": sum(r["non_200"] for r in runs),
        "peak_rss_mb": {k: max(r["peak_rss_mb"].get(k, 0) for r in runs) for k in runs[0]["peak_rss_mb"]},
        "n": runs[0]["n"],
        "workers": runs[0]["workers"],
        "concurrency": runs[0]["concurrency"],
        "receiver": runs[0]["receiver"],
    }


WORKLOAD = Workload(name="burst", measure=measure, sizes=SIZES)
