"""The scheduler's claim with recipients' own send times, against none (issue 29's proof).

    bench/.venv/bin/python -m bench.claim_send_times [--due 100000] [--rounds 3] [--share 0.5]
        [--product before=/path/to/other/checkout --product after=.]

Each run: `due` recipients born on today's date, each with one BIRTHDAY event due a minute
ago (bench.sql.users_and_events, as the burst workload seeds), of which a `share` have a send
time of their own: the i-th a different one, (i mod 24):(7i mod 60), so the occurrences the
claim computes for them share no (date, zone, time) with anyone else's beyond that cycle of
1,440 (a recipient's send time only changes the instant of the next event the claim creates;
it is never looked up: issue 29 asks that the claim gets no per-row lookup). Then
`manage.py run_scheduler --once` as shipped, timed from spawn to exit, which claims every
due event in batches (one delivery each to a default destination nobody listens at; nothing
is sent). Its rate is the events claimed per second from spawn; the figure without start-up
subtracts an idle `run_scheduler --once` timed right after; the process's CPU seconds
(user + system, from the kernel) per 1,000 events is the figure the machine's other load
disturbs least. A product whose recipients have no send_time column (a checkout before
issue 29) runs the share 0 only.

The variants take turns within each round, in an order that rotates each round, so that
every variant sees the same load on a shared machine. Results go to
bench/results/claim-send-times.json and REPORT-claim-send-times.md; the processes' output to
bench/results/raw/claim-send-times/.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import statistics
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import sql
from bench.harness import log
from bench.machine import machine_info
from bench.products import Product, products_parse

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RAW = RESULTS / "raw" / "claim-send-times"
PG = "postgres://postgres@127.0.0.1:5432"
# Another checkout's bench on the same server must use other databases (see bench/run.py).
PREFIX = os.environ.get("BENCH_DATABASE_PREFIX", "bench") + "_claim_"

# The i-th seeded recipient's own send time, for the share that has one.
SEND_TIMES = """
UPDATE users_user SET send_time = make_time(mod(n, 24), mod(7 * n, 60), 0)
FROM (SELECT id, substr(first_name, 6)::int AS n FROM users_user) numbered
WHERE users_user.id = numbered.id AND mod(numbered.n, %(every)s) = 0
"""


@dataclass(frozen=True)
class Variant:
    product: Product
    share: float  # of the recipients with a send time of their own

    @property
    def label(self) -> str:
        return f"{self.product.label}, {self.share:.0%} own send time"


def dsn(product: Product) -> str:
    """The product's database of its own on the bench's server."""
    return f"{PG}/{PREFIX}{product.label}"


def product_env(product: Product, *, secret_key: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV")}
    env.update(
        DATABASE_URL=dsn(product),
        LOG_LEVEL="WARNING",
        PYTHONUNBUFFERED="1",
        DJANGO_SECRET_KEY=secret_key,
        # The default destination, seeded from WEBHOOK_URL; no worker runs, so nothing is sent to it.
        WEBHOOK_URL="http://127.0.0.1:9/webhook",
        WEBHOOK_ALLOW_HTTP="true",
        WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
        # The seeded rows have no history to prune; the pass is left out of the timing all the same.
        HISTORY_RETENTION="36500d",
    )
    return env


def has_send_times(conn: psycopg.Connection) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = 'users_user' AND column_name = 'send_time'"
        ).fetchone()
        is not None
    )


def prepare(product: Product, *, secret_key: str) -> None:
    """A fresh database for the product, migrated by the product itself."""
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {PREFIX}{product.label} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {PREFIX}{product.label}")
    migrated = subprocess.run(
        [product.python, "manage.py", "migrate", "--noinput"],
        cwd=product.path,
        env=product_env(product, secret_key=secret_key),
        capture_output=True,
        text=True,
    )
    if migrated.returncode:
        raise RuntimeError(f"migrate failed in {product.path}:\n{migrated.stdout}{migrated.stderr}")


def drop(product: Product) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {PREFIX}{product.label} WITH (FORCE)")


def scheduler_once(product: Product, *, env: dict, log_path: Path) -> tuple[float, float]:
    """`run_scheduler --once` to its exit: (seconds from spawn, CPU seconds of the process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(log_path, "w") as out:
        done = subprocess.run(
            [product.python, "manage.py", "run_scheduler", "--once"],
            cwd=product.path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"run_scheduler --once exited {done.returncode}; see {log_path}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_once(variant: Variant, *, due: int, name: str, secret_key: str) -> dict:
    product = variant.product
    with psycopg.connect(dsn(product), autocommit=True) as conn:
        # Every recipient with their events and deliveries; the destinations too (the claim seeds
        # the default one from WEBHOOK_URL), in a product that has them.
        conn.execute("TRUNCATE users_user CASCADE")
        if conn.execute("SELECT to_regclass('delivery_destination')").fetchone()[0]:
            conn.execute("TRUNCATE delivery_destination CASCADE")
        sql.users_and_events(conn, tag=name, n=due, target_sql="now() - interval '1 minute'")
        own = 0
        if variant.share:
            conn.execute(SEND_TIMES, {"every": round(1 / variant.share)})
            own = conn.execute("SELECT count(*) FROM users_user WHERE send_time IS NOT NULL").fetchone()[0]
        conn.execute("VACUUM ANALYZE users_user")
        conn.execute("VACUUM ANALYZE scheduling_event")
        env = product_env(product, secret_key=secret_key)
        spawned = time.time()
        seconds, cpu = scheduler_once(product, env=env, log_path=RAW / f"{name}.log")
        claimed = conn.execute(
            "SELECT count(*) FROM scheduling_event WHERE status = 'PROCESSING'"
        ).fetchone()[0]
        queued_at = conn.execute(
            "SELECT extract(epoch FROM max(created_at)) FROM delivery_delivery"
        ).fetchone()[0]
        # The next occurrences the claim created: a recipient's own time, or the default, in their zone (UTC).
        own_time = "to_char(u.send_time, 'HH24:MI')" if has_send_times(conn) else "NULL"
        next_times = dict(
            conn.execute(f"""
            SELECT {own_time} IS NOT NULL,
                   count(*) FILTER (WHERE substr(e.target_timestamp_local, 12, 5) = coalesce({own_time}, '09:00'))
            FROM scheduling_event e JOIN users_user u ON u.id = e.user_id
            WHERE e.status = 'PENDING' GROUP BY 1""").fetchall()
        )
        idle_seconds, idle_cpu = scheduler_once(product, env=env, log_path=RAW / f"{name}-idle.log")
    if claimed != due:
        raise RuntimeError(f"{variant.label}: claimed {claimed} of {due}")
    if sum(next_times.values()) != due:
        raise RuntimeError(
            f"{variant.label}: {sum(next_times.values())} of {due} next events at their send time"
        )
    return {
        "variant": variant.label,
        "product": product.label,
        "share": variant.share,
        "due": due,
        "own_send_time": own,
        "claimed": claimed,
        "seconds": seconds,
        "rate": claimed / seconds,
        "queued_seconds": float(queued_at) - spawned,
        "queued_rate": claimed / (float(queued_at) - spawned),
        "idle_seconds": idle_seconds,
        "rate_excl_startup": claimed / max(0.001, seconds - idle_seconds),
        "cpu_seconds": cpu,
        "idle_cpu_seconds": idle_cpu,
        "cpu_ms_per_1000": (cpu - idle_cpu) / claimed * 1_000_000,
        "load": os.getloadavg(),
    }


def measure(*, variants: list[Variant], due: int, rounds: int, secret_key: str) -> dict:
    """Every variant `rounds` times, taking turns within each round, the first one rotating."""
    runs: list[dict] = []
    for r in range(rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for i, variant in enumerate(order):
            log(f"round {r + 1}: {variant.label}, {due:,} due (load {os.getloadavg()[0]:.2f})")
            run = run_once(
                variant,
                due=due,
                name=f"r{r + 1}-{i}-{variant.product.label}-{int(variant.share * 100)}",
                secret_key=secret_key,
            )
            run["round"] = r + 1
            runs.append(run)
            log(
                f"  {run['seconds']:.1f} s from spawn, {run['rate']:,.0f}/s ({run['rate_excl_startup']:,.0f}/s "
                f"without start-up), {run['cpu_ms_per_1000']:.0f} ms CPU per 1,000"
            )
    return {"runs": runs, "summary": summarize(runs, variants=variants)}


def summarize(runs: list[dict], *, variants: list[Variant]) -> dict:
    summary = {}
    for variant in variants:
        mine = [run for run in runs if run["variant"] == variant.label]
        summary[variant.label] = {
            key: statistics.median(run[key] for run in mine)
            for key in ("seconds", "rate", "queued_rate", "rate_excl_startup", "cpu_ms_per_1000")
        } | {
            "rates": [run["rate"] for run in mine],
            "cpu_ms_per_1000_all": [run["cpu_ms_per_1000"] for run in mine],
        }
    return summary


def report(results: dict) -> str:
    m = results["machine"]
    lines = [
        "# The claim with recipients' own send times (issue 29)\n",
        f"{results['started'][:16]} to {results['finished'][11:16]} UTC; {m['nproc']} cores ({m['cpu']}), "
        f"PostgreSQL {m['postgresql']}, load average {', '.join(f'{x:.2f}' for x in m['load_at_start'])} at the start "
        f"(the machine is shared). `{results['command']}`; {results['due']:,} due events per run, "
        f"{results['rounds']} rounds, the variants in turn within each. Products: "
        + ", ".join(f"{label} `{commit}`" for label, commit in results["products"].items())
        + ".\n",
        "| variant | from spawn, s (median) | claimed/s from spawn | without start-up | CPU ms per 1,000 | rates of the rounds |",
        "|---|---|---|---|---|---|",
    ]
    for label, s in results["summary"].items():
        lines.append(
            f"| {label} | {s['seconds']:.1f} | **{s['rate']:,.0f}** | {s['rate_excl_startup']:,.0f} | "
            f"{s['cpu_ms_per_1000']:.0f} | {', '.join(f'{x:,.0f}' for x in s['rates'])} |"
        )
    lines.append("\nRuns (load average at the end of each):\n")
    lines.append("| round | variant | s | claimed/s | CPU ms per 1,000 | load |")
    lines.append("|---|---|---|---|---|---|")
    for run in results["runs"]:
        lines.append(
            f"| {run['round']} | {run['variant']} | {run['seconds']:.1f} | {run['rate']:,.0f} | "
            f"{run['cpu_ms_per_1000']:.0f} | {run['load'][0]:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--due", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--share", type=float, default=0.5, help="Of the recipients with their own send time."
    )
    parser.add_argument(
        "--product",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="A checkout to measure (default: this one, as 'after').",
    )
    args = parser.parse_args()
    products = products_parse(args.product, default=Product("after", ROOT))
    RAW.mkdir(parents=True, exist_ok=True)
    secret_key = secrets.token_urlsafe(50)
    variants = []
    for product in products:
        prepare(product, secret_key=secret_key)
        with psycopg.connect(dsn(product), autocommit=True) as conn:
            shares = (0.0, args.share) if has_send_times(conn) else (0.0,)
        variants += [Variant(product, share) for share in shares]
    results = {
        "started": datetime.now(UTC).isoformat(),
        "machine": machine_info(),
        "due": args.due,
        "rounds": args.rounds,
        "command": "python -m bench.claim_send_times "
        + " ".join(
            f"--{k} {v}" for k, v in (("due", args.due), ("rounds", args.rounds), ("share", args.share))
        ),
        "products": {product.label: product.commit() for product in products},
    }
    try:
        results.update(measure(variants=variants, due=args.due, rounds=args.rounds, secret_key=secret_key))
    finally:
        for product in products:
            drop(product)
    results["finished"] = datetime.now(UTC).isoformat()
    (RESULTS / "claim-send-times.json").write_text(json.dumps(results, indent=1, default=str))
    (RESULTS / "REPORT-claim-send-times.md").write_text(report(results))
    log(f"report: {RESULTS / 'REPORT-claim-send-times.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
