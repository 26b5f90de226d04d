"""POST /api/v1/users/ under gunicorn and wrk, beside a bare Django view doing one INSERT (bench/bareapi/)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.api_server import api_token, gunicorn_start
from bench.harness import Harness, log
from bench.stats import median
from bench.workload import Workload
from bench.wrk import wrk_run


@dataclass(frozen=True)
class ApiSize:
    runs: int  # rounds of the product's and the bare view's wrk runs; figures are medians
    api_seconds: int  # seconds of each wrk run


SIZES = {"small": ApiSize(runs=3, api_seconds=3), "full": ApiSize(runs=3, api_seconds=10)}


def measure(harness: Harness, *, size: ApiSize) -> dict:
    harness.truncate()
    token = api_token(harness)
    secs = size.api_seconds
    out = {"product": [], "bare": []}
    for _ in range(size.runs):
        for which, module, path in (
            ("product", "config.settings", "/api/v1/users/"),
            ("bare", "bench.bareapi.settings", "/bench/bare-insert/"),
        ):

            def one(module: str, path: str):
                server = gunicorn_start(harness, settings_module=module)
                try:
                    return wrk_run(
                        f"http://127.0.0.1:{server.port}{path}",
                        script="bench/api_post.lua",
                        connections=8,
                        seconds=secs,
                        env={"BENCH_TOKEN": token},
                    )
                finally:
                    harness.processes.stop([server.process])

            res = harness.attempt(one, module, path)
            out[which].append(res)
            log(f"api {which}: {res['rps']:.0f} req/s, p99 {res['p99_ms']} ms, non-2xx {res['non_2xx']}")
    p, b = (median(r["rps"] for r in out[k]) for k in ("product", "bare"))
    users = harness.conn.execute("SELECT count(*) FROM users_user").fetchone()[0]
    events = harness.conn.execute("SELECT count(*) FROM scheduling_event").fetchone()[0]
    return {
        "runs": out,
        "product_rps": p,
        "bare_rps": b,
        "ratio": p / b,
        "product_p99_ms": median(r["p99_ms"] for r in out["product"]),
        "bare_p99_ms": median(r["p99_ms"] for r in out["bare"]),
        "product_non_2xx": sum(r["non_2xx"] for r in out["product"]),
        "users_created": users,
        "events_created": events,
        "setup": f"gunicorn config.wsgi -w 2 (sync workers); wrk -t1 -c8 -d{secs}s --latency",
    }


WORKLOAD = Workload(name="api", measure=measure, sizes=SIZES)
