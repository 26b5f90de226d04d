"""The burst against receivers answering in 0, 50, 250 and 1,000 ms, the product as shipped (issue 18).

For each latency, `receivers_n` events due at once, then `run_scheduler` + 2 x `run_worker`
with no `--concurrency` or `--batch-size` (each worker's adaptive in-flight limit), each run
from no endpoint row; after each, the bare aiohttp reference (bench/raw_client.py) with a
fixed number of requests open, the same number of POSTs, timed the same way.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from dataclasses import dataclass

from bench.harness import Harness, log
from bench.locations import BENCH_PY, ROOT
from bench.processes import LimitSampler, RssSampler
from bench.receiver import LATENCIES_MS, StatusSampler, free_port
from bench.stats import median, percentile, steady_rate
from bench.workload import Workload


@dataclass(frozen=True)
class ReceiversSize:
    receivers_n: int  # events due at once, per latency and round
    receivers_runs: int  # rounds, the latencies in turn within each; the report gives medians


SIZES = {
    "small": ReceiversSize(receivers_n=10_000, receivers_runs=1),
    "full": ReceiversSize(receivers_n=100_000, receivers_runs=3),
}

# The bare aiohttp reference: requests it keeps open at each receiver latency (ms), enough
# for at least 4,096/s at every latency (the product's own cap is 2 workers x 2,000), so
# that the reference is held back by its CPU only.
REFERENCE_IN_FLIGHT = {0: 64, 50: 256, 250: 1024, 1000: 4096}


def receivers_once(harness: Harness, *, n: int, latency_ms: int) -> dict:
    """n events due at once, 1 scheduler + 2 workers as shipped (no --concurrency / --batch-size), a receiver
    answering after latency_ms; from process start to the last delivery."""
    expected = harness.seed_due(tag=harness.tag("recv"), n=n)
    # Every run starts with no endpoint rows: no state, Retry-After or shares left from an earlier run.
    if harness.conn.execute("SELECT to_regclass('delivery_endpoint')").fetchone()[0]:
        harness.conn.execute("TRUNCATE delivery_endpoint CASCADE")
    url = harness.receiver.url_latency(latency_ms)
    env = harness.env(WEBHOOK_URL=url)
    reader = harness.receiver.reader()
    # Each worker serves its metrics (its in-flight limit) on a port of its own; nothing else changes.
    ports = {f"worker{i + 1}": free_port() for i in range(2)}
    started = time.time()
    sched = harness.processes.spawn("scheduler", ["-m", "bench.product_main", "run_scheduler"], env=env)
    ws = [
        harness.processes.spawn(
            "worker", ["-m", "bench.product_main", "run_worker", "--metrics-port", str(port)], env=env
        )
        for port in ports.values()
    ]
    names = {"scheduler": sched.pid, **{f"worker{i + 1}": w.pid for i, w in enumerate(ws)}}
    sampler = RssSampler(names)
    sampler.start()
    status = StatusSampler(harness.receiver)
    status.start()
    limits = LimitSampler(ports, url=url)
    limits.start()
    cpu_at_first: dict[str, float] = {}
    procs = {"scheduler": sched, **{f"worker{i + 1}": w for i, w in enumerate(ws)}}

    def on_tick(seen: int) -> None:
        if seen and not cpu_at_first:  # start-up and the first claims: the fixed part of the CPU
            cpu_at_first.update(sampler.cpu_seconds())
        dead = [name for name, proc in procs.items() if proc.poll() is not None]
        if dead:  # say so now rather than wait out the timeout
            raise RuntimeError(
                f"{', '.join(dead)} exited during the run (code "
                f"{', '.join(str(procs[d].returncode) for d in dead)}); see bench/results/raw/"
                "scheduler.log and worker.log"
            )

    try:
        counts = reader.wait_for(expected, timeout=min(n / 15 + 120, 900), on_tick=on_tick)
    finally:
        peak = sampler.finish()
        receiver = status.finish()
        limit = limits.finish()
        harness.processes.stop([sched, *ws])
    arrivals = counts.pop("arrivals")
    flight = reader.in_flight(expected)
    seconds = (counts["last_arrival"] or time.time()) - started
    since = sorted(t - started for t in arrivals.values())
    delivered = counts["unique"]
    cpu = sum(sampler.cpu.values())
    cpu_first = sum(cpu_at_first.values()) if cpu_at_first else None
    return {
        "n": n,
        "latency_ms": latency_ms,
        "seconds": seconds,
        "rate": delivered / seconds,
        "steady_rate": steady_rate(counts),
        "peak_rss_mb": peak,
        "peak_in_flight": flight["peak"],
        "mean_in_flight": flight["mean"],
        **receiver,
        "worker_limit": limit,
        "cpu_s": sampler.cpu,
        "cpu_s_total": cpu,
        "cpu_ms_per_delivery": 1000 * cpu / delivered if delivered else None,
        "cpu_s_to_first": cpu_first,
        "cpu_ms_per_delivery_after_first": 1000 * (cpu - cpu_first) / (delivered - 1)
        if cpu_first is not None and delivered > 1
        else None,
        "p50_s": percentile(since, percent=50),
        "p99_s": percentile(since, percent=99),
        **counts,
    }


def reference_once(harness: Harness, *, n: int, latency_ms: int) -> dict:
    """The bare aiohttp client (bench/raw_client.py), one process, the same n POSTs at a fixed in-flight."""
    in_flight = REFERENCE_IN_FLIGHT[latency_ms]
    prefix = harness.tag(f"ref{latency_ms}-")
    url = harness.receiver.url_latency(latency_ms)
    reader = harness.receiver.reader()
    status = StatusSampler(harness.receiver)
    status.start()
    started = time.time()
    try:
        r = subprocess.run(
            [BENCH_PY, "-m", "bench.raw_client", "aiohttp", url, str(n), prefix, str(in_flight)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=min(n / 15 + 120, 900),
        )
    finally:
        receiver = status.finish()
    if r.returncode:
        raise RuntimeError(f"raw_client failed ({r.returncode}):\n{r.stderr[-2000:]}")
    res = json.loads(r.stdout.strip().splitlines()[-1])
    expected = {f"{prefix}-{i}" for i in range(n)}
    counts = reader.wait_for(expected, timeout=30)
    counts.pop("arrivals")
    flight = reader.in_flight(expected)
    seconds = (counts["last_arrival"] or time.time()) - started
    delivered = counts["unique"]
    return {
        "n": n,
        "latency_ms": latency_ms,
        "in_flight": in_flight,
        "seconds": seconds,
        "rate": delivered / seconds,
        "client_seconds": res["seconds"],
        "client_rate": res["rate"],
        "cpu_s_total": res["cpu_s"],
        "cpu_ms_per_delivery": 1000 * res["cpu_s"] / delivered if delivered else None,
        "peak_in_flight": flight["peak"],
        "mean_in_flight": flight["mean"],
        **receiver,
        **counts,
    }


def measure(harness: Harness, *, size: ReceiversSize) -> dict:
    """The burst (n due at once, 1 scheduler + 2 workers as shipped) against receivers answering in 0, 50,
    250 and 1,000 ms, each beside the bare aiohttp reference at the same latency; rounds interleave them."""
    n, rounds = size.receivers_n, size.receivers_runs
    product: dict[str, list] = {str(ms): [] for ms in LATENCIES_MS}
    reference: dict[str, list] = {str(ms): [] for ms in LATENCIES_MS}
    load = os.getloadavg()
    for i in range(rounds):
        for ms in LATENCIES_MS:
            log(
                f"receivers: {n:,} events due, {ms} ms receiver, 1 scheduler + 2 workers as shipped "
                f"(run {i + 1}/{rounds})"
            )
            run = harness.attempt(receivers_once, harness, n=n, latency_ms=ms)
            product[str(ms)].append(run)
            log(
                f"receivers: {ms} ms: {run['rate']:,.0f}/s ({run['seconds']:.1f} s), peak in flight "
                f"{run['peak_in_flight']}, {run['peak_connections']} connections, CPU "
                f"{run['cpu_ms_per_delivery'] or 0:.3f} ms/delivery, worker limits {run['worker_limit']['peak']}, "
                f"duplicates {run['duplicates']}, missing {run['missing']}"
            )
            ref = reference_once(harness, n=n, latency_ms=ms)
            reference[str(ms)].append(ref)
            log(
                f"receivers: {ms} ms: aiohttp reference ({ref['in_flight']} in flight) {ref['rate']:,.0f}/s, "
                f"peak in flight {ref['peak_in_flight']}, missing {ref['missing']}"
            )
    summary = {}
    for ms in LATENCIES_MS:
        p, r = product[str(ms)], reference[str(ms)]
        summary[str(ms)] = {
            "latency_ms": ms,
            "n": n,
            "runs": len(p),
            "seconds": median(x["seconds"] for x in p),
            "rate": median(x["rate"] for x in p),
            "rates": [x["rate"] for x in p],
            "steady_rate": median(x["steady_rate"] for x in p),
            "peak_in_flight": median(x["peak_in_flight"] for x in p),
            "mean_in_flight": median(x["mean_in_flight"] for x in p),
            "peak_connections": median(x["peak_connections"] for x in p),
            "peak_writing": median(x["peak_writing"] for x in p),
            "worker_limit_peak": max(
                (v for x in p for v in x["worker_limit"]["peak"].values()), default=None
            ),
            "worker_limit_peak_sum": median(x["worker_limit"]["peak_sum"] for x in p),
            "cpu_ms_per_delivery": median(x["cpu_ms_per_delivery"] for x in p),
            "cpu_ms_per_delivery_after_first": median(x["cpu_ms_per_delivery_after_first"] for x in p),
            "cpu_s_to_first": median(x["cpu_s_to_first"] for x in p),
            "p50_s": median(x["p50_s"] for x in p),
            "p99_s": median(x["p99_s"] for x in p),
            "duplicates": sum(x["duplicates"] for x in p),
            "missing": sum(x["missing"] for x in p),
            "non_200": sum(x["non_200"] for x in p),
            "peak_rss_mb": {k: max(x["peak_rss_mb"].get(k, 0) for x in p) for k in p[0]["peak_rss_mb"]},
            "reference": {
                "in_flight": REFERENCE_IN_FLIGHT[ms],
                "rate": median(x["rate"] for x in r),
                "rates": [x["rate"] for x in r],
                "client_rate": median(x["client_rate"] for x in r),
                "seconds": median(x["seconds"] for x in r),
                "peak_in_flight": median(x["peak_in_flight"] for x in r),
                "peak_connections": median(x["peak_connections"] for x in r),
                "cpu_ms_per_delivery": median(x["cpu_ms_per_delivery"] for x in r),
                "duplicates": sum(x["duplicates"] for x in r),
                "missing": sum(x["missing"] for x in r),
            },
        }
    zero = summary["0"]["rate"]
    for v in summary.values():
        v["ratio_to_zero"] = v["rate"] / zero if zero else None
        v["reference"]["ratio_to_zero"] = (
            v["reference"]["rate"] / summary["0"]["reference"]["rate"]
            if summary["0"]["reference"]["rate"]
            else None
        )
        v["ratio_to_reference"] = v["rate"] / v["reference"]["rate"] if v["reference"]["rate"] else None
    return {
        "n": n,
        "runs": rounds,
        "latencies_ms": list(LATENCIES_MS),
        "product": product,
        "reference": reference,
        "summary": summary,
        "reference_in_flight": {str(k): v for k, v in REFERENCE_IN_FLIGHT.items()},
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "load_at_start": load,
        "command": harness.results.get("command"),
    }


WORKLOAD = Workload(name="receivers", measure=measure, sizes=SIZES)
