"""A receiver behind a rate limiter that answers 429 without Retry-After (issue 28, point 7).

    make bench BENCH_ARGS="--only rate_limited"       # this checkout, 200/s and 50/s, 3 rounds, into REPORT.md
    bench/.venv/bin/python -m bench.rate_limited [--rates 200,50] [--seconds 40] [--runs 3]
        [--product before=/path/to/other/checkout --product after=.]

Many receivers enforce a rate by refusing what goes over it with a bare 429: nginx
`limit_req`, API gateways, chat services. Here the receiver is exactly that: a Debian
nginx with one location per rate, each `limit_req zone=... burst=<rate/10> nodelay` with
`limit_req_status 429` (no Retry-After), answering what it lets through after 250 ms
(`echo_sleep`, libnginx-mod-http-echo). The burst lets through a tenth of a second's worth
of requests arriving at once, as nginx's own examples configure it; without any, two
workers sending side by side at a steady rate collide within the limiter's 1/rate spacing
all the time.

For each rate, `rate x seconds` events due at once, then `run_scheduler` + 2 x
`run_worker` as shipped (no --concurrency, no WEBHOOK_MAX_RATE: the point is what the
product learns with no setting), from no endpoint row, until every event got a 200. Each
`--product` is a checkout with its own `.venv` (or a link to one); the products take
turns within each round, so that before and after see the same load on a shared machine.

The receiver's access log is the truth: the accepted rate is the 200s per second between
the first and the last 200 (the product's start-up left out), as a fraction of the limit;
the refused share is the 429s among every request. The database says how many deliveries
ended DEAD, the workers' logs whether the endpoint went FAILING. Results go to
bench/results/rate-limited.json and REPORT-rate-limited.md; the processes' logs to
bench/results/raw/rate-limited/.

As the `rate_limited` workload of bench/run.py (`measure(harness, size=...)`), the
product is this checkout alone, at the issue's two rates, `rate_limited_seconds` of
events and `rate_limited_runs` rounds; the results go to results.json and REPORT.md
(`report_section`). Run as a module, it compares checkouts (`--product`, taken in turn)
and writes a report of its own. Either way the receiver and the database (dropped at
the end) are the module's own, not the harness's: the limiter's nginx is another
configuration, and each product migrates the database its way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import sql
from bench.harness import Harness, log
from bench.locations import POSTGRES, RESULTS, ROOT
from bench.products import Product, products_parse
from bench.receiver import ECHO_MODULE, LogReader, free_port
from bench.workload import Workload

RAW = RESULTS / "raw" / "rate-limited"
# Another checkout's bench on the same server must use other databases (see bench/run.py).
DB = os.environ.get("BENCH_DATABASE_PREFIX", "bench") + "_rate_limited"
DSN = f"{POSTGRES}/{DB}"
LATENCY_S = 0.25
WORKERS = 2
# The limits (requests/s); the module's --rates may ask for others.
RATES = (200, 50)


@dataclass(frozen=True)
class RateLimitedSize:
    rate_limited_seconds: int  # events due at once = the limit x this
    rate_limited_runs: int  # rounds, the rates in turn within each; the report gives medians


SIZES = {
    "small": RateLimitedSize(rate_limited_seconds=10, rate_limited_runs=1),
    "full": RateLimitedSize(rate_limited_seconds=40, rate_limited_runs=3),
}

CONF = """\
load_module {echo};
worker_processes 1;
worker_rlimit_nofile {nofile};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    log_format keys '$msec $http_x_idempotency_key $status $request_time';
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    client_body_buffer_size 64k;
    limit_req_status 429;
    # Each refusal would be an error-log line otherwise.
    limit_req_log_level info;
{zones}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        access_log {tmp}/access.log keys buffer=256k flush=100ms;
{locations}
    }}
}}
"""


def burst_for(rate: int) -> int:
    """The limiter's burst: a tenth of a second's worth of requests (at least one)."""
    return max(1, rate // 10)


class RateLimitedReceiver:
    """nginx answering /limit/<rate> after 250 ms, within `rate` requests/s, else 429 at once."""

    def __init__(self, rates: list[int]) -> None:
        self.rates = rates
        self.port = free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-rate-limited-"))
        self.log_path = self.tmp / "access.log"
        self.proc: subprocess.Popen | None = None

    def url(self, rate: int) -> str:
        return f"http://127.0.0.1:{self.port}/limit/{rate}"

    def start(self) -> RateLimitedReceiver:
        if not ECHO_MODULE.exists():
            raise RuntimeError(f"{ECHO_MODULE} missing: apt-get install nginx libnginx-mod-http-echo")
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
        if nofile == resource.RLIM_INFINITY or nofile < 0:
            nofile = 65536
        zones = "\n".join(
            f"    limit_req_zone $server_port zone=limit{rate}:1m rate={rate}r/s;" for rate in self.rates
        )
        locations = "\n".join(
            f"        location = /limit/{rate} {{ limit_req zone=limit{rate} burst={burst_for(rate)} nodelay; "
            f"default_type application/json; echo_read_request_body; echo_sleep {LATENCY_S:g}; "
            "echo '{\"ok\":true}'; }"
            for rate in self.rates
        )
        conf = CONF.format(
            echo=ECHO_MODULE,
            tmp=self.tmp,
            port=self.port,
            nofile=nofile,
            connections=max(1024, min(16384, nofile - 64)),
            zones=zones,
            locations=locations,
        )
        (self.tmp / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen(
            ["nginx", "-p", str(self.tmp), "-c", str(self.tmp / "nginx.conf"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / "stderr.log", "w"),
        )
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError((self.tmp / "stderr.log").read_text()) from None
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def reader(self) -> LogReader:
        time.sleep(0.25)  # the previous run's buffered lines land before the offset is taken
        return LogReader(self.log_path)


def product_env(*, url: str, secret_key: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")}
    env.update(
        DATABASE_URL=DSN,
        WEBHOOK_URL=url,
        WEBHOOK_TIMEOUT="10s",
        WEBHOOK_SECRET="",
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        DJANGO_SECRET_KEY=secret_key,
        # The receiver is local and plain http: a product that refuses receivers behind it
        # (SSRF rules) must be told to allow this one; one without such rules ignores these.
        WEBHOOK_ALLOW_HTTP="true",
        WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
    )
    return env


def spawn(product: Product, args: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    out = open(log_path, "w")
    return subprocess.Popen(
        [product.python, "manage.py", *args], cwd=product.path, env=env, stdout=out, stderr=subprocess.STDOUT
    )


def learned_rate(port: int) -> float | None:
    """A worker's birthday_worker_learned_rate for its one endpoint (None: the product has no such metric)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
    except OSError:
        return None
    found = re.search(r"^birthday_worker_learned_rate\{[^}]*\} (\S+)$", body, re.M)
    return float(found.group(1)) if found else None


def stop(processes: list[subprocess.Popen], timeout: float = 20) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def seed_due(conn: psycopg.Connection, *, tag: str, n: int) -> set[str]:
    """Empty tables and no endpoint row, then n events due a minute ago; their idempotency keys."""
    conn.execute(sql.TRUNCATE)
    conn.execute("TRUNCATE delivery_endpoint CASCADE")
    sql.users_and_events(conn, tag=tag, n=n, target_sql="now() - interval '1 minute'")
    conn.execute("ANALYZE users_user; ANALYZE scheduling_event")
    return set(sql.pending_keys(conn))


def run_once(
    conn: psycopg.Connection,
    receiver: RateLimitedReceiver,
    product: Product,
    *,
    rate: int,
    n: int,
    name: str,
    secret_key: str,
) -> dict:
    """n events due at once to the receiver limited at `rate`; until every one got a 200."""
    expected = seed_due(conn, tag=name, n=n)
    env = product_env(url=receiver.url(rate), secret_key=secret_key)
    reader = receiver.reader()
    started = time.time()
    logs = {
        "scheduler": RAW / f"{name}-scheduler.log",
        **{f"worker{i + 1}": RAW / f"{name}-worker{i + 1}.log" for i in range(WORKERS)},
    }
    # Each worker serves its metrics on a port of its own: its learned rate is read at the end.
    ports = {f"worker{i + 1}": free_port() for i in range(WORKERS)}
    processes = {"scheduler": spawn(product, ["run_scheduler"], env, logs["scheduler"])}
    processes.update(
        {
            role: spawn(product, ["run_worker", "--metrics-port", str(port)], env, logs[role])
            for role, port in ports.items()
        }
    )
    accepted: set[str] = set()
    load_before = os.getloadavg()
    deadline = time.monotonic() + n / (rate * 0.2) + 120
    try:
        while len(accepted) < len(expected) and time.monotonic() < deadline:
            before = len(reader.rows)
            reader.poll()
            accepted.update(
                key for _, key, status in reader.rows[before:] if status == 200 and key in expected
            )
            dead = [role for role, process in processes.items() if process.poll() is not None]
            if dead:
                raise RuntimeError(f"{', '.join(dead)} exited during the run; see {RAW}")
            time.sleep(0.1)
        time.sleep(1.0)  # late requests, if any, are counted too (and the gauges are a refresh newer)
        reader.poll()
        rates = {role: learned_rate(port) for role, port in ports.items()}
    finally:
        stop(list(processes.values()))
    rows = [(at, key, status) for at, key, status in reader.rows if key in expected]
    ok = sorted(at for at, _, status in rows if status == 200)
    statuses = Counter(status for _, _, status in rows)
    per_key = Counter(key for _, key, status in rows if status == 200)
    seconds_accepting = ok[-1] - ok[0] if len(ok) > 1 else None
    accepted_rate = (len(ok) - 1) / seconds_accepting if seconds_accepting else None
    dead = conn.execute("SELECT count(*) FROM delivery_delivery WHERE status = 'DEAD'").fetchone()[0]
    failing = sum(
        path.read_text().count("Endpoint failing") for role, path in logs.items() if role != "scheduler"
    )
    # Accepted per second over the run, from the first 200: how the rate was found and held.
    timeline = Counter(int(at - ok[0]) for at in ok) if ok else Counter()
    return {
        "product": product.label,
        "rate_limit": rate,
        "burst": burst_for(rate),
        "n": n,
        "requests": len(rows),
        "accepted": len(ok),
        "unique_accepted": len(per_key),
        "missing": len(expected) - len(per_key),
        "duplicates": sum(c - 1 for c in per_key.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "refused": statuses.get(429, 0),
        "refused_share": statuses.get(429, 0) / len(rows) if rows else None,
        "seconds_accepting": seconds_accepting,
        "accepted_rate": accepted_rate,
        "fraction_of_limit": accepted_rate / rate if accepted_rate else None,
        "seconds_from_spawn": (ok[-1] - started) if ok else None,
        "rate_from_spawn": len(per_key) / (ok[-1] - started) if ok else None,
        "dead": dead,
        "endpoint_failing": failing,
        "learned_rates": rates,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "timeline": [timeline.get(second, 0) for second in range(int(ok[-1] - ok[0]) + 1)] if ok else [],
    }


def measure(harness: Harness, *, size: RateLimitedSize) -> dict:
    """The workload: this checkout at the issue's rates (its own receiver and database, not the harness's)."""
    product = Product("this", ROOT)
    results = measure_products(
        products=[product], rates=list(RATES), seconds=size.rate_limited_seconds, runs=size.rate_limited_runs
    )
    results.update(
        product_commit=product.commit(),
        latency_s=LATENCY_S,
        workers=WORKERS,
        seconds=size.rate_limited_seconds,
        rates=list(RATES),
        command=harness.results.get("command"),
    )
    return results


def measure_products(*, products: list[Product], rates: list[int], seconds: int, runs: int) -> dict:
    """Every product at every rate, `runs` rounds; the products in turn within each round."""
    RAW.mkdir(parents=True, exist_ok=True)
    database_create()
    secret_key = secrets.token_urlsafe(50)
    for product in products:  # the same migrations, or the later one's on top
        migrate = subprocess.run(
            [product.python, "manage.py", "migrate", "--noinput"],
            cwd=product.path,
            env=product_env(url="http://127.0.0.1:9/", secret_key=secret_key),
            capture_output=True,
            text=True,
        )
        if migrate.returncode:
            raise RuntimeError(f"migrate failed in {product.path}:\n{migrate.stdout}{migrate.stderr}")
    conn = sql.connect(DSN)
    receiver = RateLimitedReceiver(rates).start()
    results: dict = {"runs": [], "load": []}
    try:
        for round_ in range(runs):
            for product in products:
                for rate in rates:
                    name = f"{product.label}-{rate}-{round_ + 1}"
                    log(
                        f"{name}: {rate * seconds:,} events, receiver limited at {rate}/s (burst "
                        f"{burst_for(rate)}), {LATENCY_S * 1000:g} ms; load {os.getloadavg()[0]:.1f}"
                    )
                    results["load"].append(os.getloadavg()[0])
                    run = run_once(
                        conn, receiver, product, rate=rate, n=rate * seconds, name=name, secret_key=secret_key
                    )
                    run["round"] = round_ + 1
                    results["runs"].append(run)
                    log(
                        f"{name}: {run['accepted_rate'] or 0:.1f}/s accepted = {run['fraction_of_limit'] or 0:.3f} "
                        f"of the limit, {100 * (run['refused_share'] or 0):.1f} % refused, dead {run['dead']}, "
                        f"missing {run['missing']}, duplicates {run['duplicates']}, "
                        f"endpoint failing {run['endpoint_failing']}x"
                    )
    finally:
        receiver.stop()
        conn.close()
        database_drop()
    results["summary"] = summarize(results["runs"], products=products, rates=rates)
    return results


def database_create() -> None:
    admin = sql.connect(f"{POSTGRES}/postgres")
    admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {DB}")
    admin.close()


def database_drop() -> None:
    admin = sql.connect(f"{POSTGRES}/postgres")
    admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    admin.close()


def summarize(runs: list[dict], *, products: list[Product], rates: list[int]) -> dict:
    summary = {}
    for product in products:
        for rate in rates:
            mine = [r for r in runs if r["product"] == product.label and r["rate_limit"] == rate]
            if not mine:
                continue
            summary[f"{product.label} {rate}"] = {
                "product": product.label,
                "rate_limit": rate,
                "runs": len(mine),
                "fraction_of_limit": statistics.median(r["fraction_of_limit"] or 0 for r in mine),
                "fractions": [r["fraction_of_limit"] for r in mine],
                "accepted_rate": statistics.median(r["accepted_rate"] or 0 for r in mine),
                "refused_share": statistics.median(r["refused_share"] or 0 for r in mine),
                "refused_shares": [r["refused_share"] for r in mine],
                "rate_from_spawn": statistics.median(r["rate_from_spawn"] or 0 for r in mine),
                "dead": sum(r["dead"] for r in mine),
                "missing": sum(r["missing"] for r in mine),
                "duplicates": sum(r["duplicates"] for r in mine),
                "endpoint_failing": sum(r["endpoint_failing"] for r in mine),
                "learned_rate_sums": [
                    sum(v for v in r["learned_rates"].values() if v is not None)
                    if any(v is not None for v in r["learned_rates"].values())
                    else None
                    for r in mine
                ],
            }
    return summary


def machine() -> dict:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "unknown",
    )
    pg = subprocess.run(
        ["psql", f"{POSTGRES}/postgres", "-Atc", "SHOW server_version"], capture_output=True, text=True
    )
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "postgresql": pg.stdout.strip(),
        "nginx": nginx,
        "python": platform.python_version(),
        "load_at_start": os.getloadavg(),
    }


def report(results: dict) -> str:
    """The report of one invocation as a module: how it was run, on what, and the figures; what they mean is
    added by hand."""
    m = results["machine"]
    products = "; ".join(
        f"`{label}`: {p['commit']} ({p['path']})" for label, p in results["products"].items()
    )
    lines = [
        "# A receiver's rate limit, learned (issue 28, point 7)",
        "",
        f"Run {results['started']} to {results['finished']} with `{results['command']}`.",
        "",
        f"Machine: {m['nproc']} x {m['cpu']}, PostgreSQL {m['postgresql']}, {m['nginx']}, Python {m['python']}; "
        f"load average at the start {', '.join(f'{x:.1f}' for x in m['load_at_start'])}, when each run began "
        f"{min(results['load']):.1f}-{max(results['load']):.1f} (1 min). The machine is shared with other agents' "
        "test suites and benches: the products take turns within each round so that they see the same load.",
        "",
        f"Products: {products}.",
        "",
        method(results)
        + " *Learned rates* = the sum of the workers' `birthday_worker_learned_rate` at the end (a "
        "product from before the learned rate has none).",
        "",
        *table(results["summary"]),
    ]
    return "\n".join(lines) + "\n"


def method(results: dict) -> str:
    """What one run is and what each figure means."""
    return (
        f"Each run: `rate x {results['seconds']}` events due at once, `run_scheduler` + {results['workers']} x "
        "`run_worker` as shipped (no `--concurrency`, no `WEBHOOK_MAX_RATE`), from no endpoint row, until every "
        f"event got a 200; the receiver is nginx `limit_req rate=<rate>r/s burst=<rate/10> nodelay` with "
        f"`limit_req_status 429` (no Retry-After), answering what it lets through after "
        f"{results['latency_s'] * 1000:g} ms. *Accepted rate* = the 200s per second between the first and the last "
        "200 in nginx's access log; *fraction of the limit* = that over the limit; *refused* = the 429s among every "
        "request; *rate from spawn* = events / (last 200 - process start)."
    )


def table(summary: dict) -> list[str]:
    """The figures, one row per product and limit: medians, each run's in brackets."""
    lines = [
        "| product | limit | runs | accepted rate, median | fraction of the limit, median (runs) "
        "| refused, median (runs) | rate from spawn, median | learned rates at the end (runs) "
        "| DEAD / missing / twice | endpoint went FAILING |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary.values():
        fractions = ", ".join(f"{f:.2f}" for f in s["fractions"] if f is not None)
        refused = ", ".join(f"{100 * r:.1f}" for r in s["refused_shares"] if r is not None)
        learned = ", ".join("-" if v is None else f"{v:.0f}" for v in s["learned_rate_sums"])
        lines.append(
            f"| {s['product']} | {s['rate_limit']}/s | {s['runs']} | {s['accepted_rate']:.1f}/s "
            f"| **{s['fraction_of_limit']:.2f}** ({fractions}) | **{100 * s['refused_share']:.1f} %** ({refused}) "
            f"| {s['rate_from_spawn']:.1f}/s | {learned} | {s['dead']} / {s['missing']} / {s['duplicates']} "
            f"| {s['endpoint_failing']}x |"
        )
    return lines


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["rate_limited"]`)."""
    lines = ["## Rate-limited receiver: 429 without Retry-After at 200/s and 50/s\n"]
    w = res.get("rate_limited")
    if w is None:
        return lines + ["_rate_limited: not run._"]
    if "error" in w:
        return lines + [f"_rate_limited failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    loads = [r["load_before"][0] for r in w["runs"]] + [r["load_after"][0] for r in w["runs"]]
    lines.append(
        f"This checkout (`{w['product_commit']}`), {w['runs'][-1]['round']} round(s), the limits in turn within "
        f"each; medians. {method(w)} Load average (1 min) before and after the runs: "
        f"{min(loads):.1f}-{max(loads):.1f}.\n"
    )
    return [*lines, *table(w["summary"]), ""]


WORKLOAD = Workload(name="rate_limited", measure=measure, sizes=SIZES)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,50", help="the limiter's rates, requests/s")
    parser.add_argument("--seconds", type=int, default=40, help="events due = rate x this")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--product",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a checkout to run (default: this one, as 'this'); several take turns",
    )
    parser.add_argument(
        "--output", default="rate-limited", help="name of the JSON and report under bench/results/"
    )
    args = parser.parse_args()
    products = products_parse(args.product, default=Product("this", ROOT))
    rates = [int(r) for r in args.rates.split(",")]
    command = " ".join([Path(sys.executable).name, "-m", "bench.rate_limited", *sys.argv[1:]])
    started = datetime.now(UTC).isoformat(timespec="seconds")
    results = measure_products(products=products, rates=rates, seconds=args.seconds, runs=args.runs)
    results.update(
        started=started,
        finished=datetime.now(UTC).isoformat(timespec="seconds"),
        command=command,
        machine=machine(),
        products={p.label: {"path": str(p.path), "commit": p.commit()} for p in products},
        latency_s=LATENCY_S,
        workers=WORKERS,
        seconds=args.seconds,
        rates=rates,
    )
    (RESULTS / f"{args.output}.json").write_text(json.dumps(results, indent=1))
    text = report(results)
    (RESULTS / f"REPORT-{args.output}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
