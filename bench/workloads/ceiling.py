"""What the receiver itself can take (wrk against nginx at 0 and 50 ms), before any client is blamed."""

from __future__ import annotations

from dataclasses import dataclass

from bench.harness import Harness
from bench.stats import median
from bench.workload import Workload
from bench.wrk import wrk_run


@dataclass(frozen=True)
class CeilingSize:
    runs: int  # wrk runs of 5 s at each latency; the figures are their medians


SIZES = {"small": CeilingSize(runs=3), "full": CeilingSize(runs=3)}


def measure(harness: Harness, *, size: CeilingSize) -> dict:
    out = {"zero": [], "slow": []}
    for _ in range(size.runs):
        out["zero"].append(
            harness.attempt(wrk_run, harness.receiver.url, script="bench/post.lua", connections=16, seconds=5)
        )
        out["slow"].append(
            harness.attempt(
                wrk_run, harness.receiver.url_slow, script="bench/post.lua", connections=64, seconds=5
            )
        )
    return {
        "zero_rps": median(r["rps"] for r in out["zero"]),
        "slow_rps": median(r["rps"] for r in out["slow"]),
        "zero_runs": [r["rps"] for r in out["zero"]],
        "slow_runs": [r["rps"] for r in out["slow"]],
        "zero_p99_ms": median(r["p99_ms"] for r in out["zero"]),
        "slow_p99_ms": median(r["p99_ms"] for r in out["slow"]),
        "wrk": "wrk -t1 -c16 (zero) / -c64 (50 ms) -d5s with bench/post.lua",
    }


WORKLOAD = Workload(name="ceiling", measure=measure, sizes=SIZES)
