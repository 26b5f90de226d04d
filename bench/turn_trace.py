"""One worker's turns, traced: where its thread waits on PostgreSQL with nothing in flight (issue 36).

    bench/.venv/bin/python -m bench.turn_trace [--checkout DIR] [--queued N] [--receiver URL]

The `queued` workload times the worker whole; this shows the shape of its turns. It
creates the database `bench_turn_trace`, migrates it with the checkout's `manage.py`,
queues N deliveries (100,000) as the workload does (bench/workloads/queued.py `seed`),
then runs the checkout's `run_worker --once` with its claim (`Claimer.claim_more`) and its
record (`Worker._record_if_ready`) wrapped: each step's wall time, and how many requests
were open when it began. A receiver must answer at URL (the workload's nginx `return 200`;
default http://127.0.0.1:18080/webhook). Prints one JSON line: the run's seconds and rate,
and per step the turns, the median milliseconds, and the share of the steps that began
with no request open (whose wait on the server overlapped nothing).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DATABASE = "bench_turn_trace"


def traced_worker() -> dict:
    """In the checkout's Python: run the worker once over what is queued, its claim and record timed."""
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from delivery import claimer, worker

    steps: dict[str, list[tuple[float, int]]] = {"claim": [], "record": []}
    workers: list = []

    def timed(cls, name: str, step: str, sender_of) -> None:
        original = getattr(cls, name)

        def run(self, *args, **kwargs):
            open_at_start = len(sender_of(self).in_flight)
            started = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                steps[step].append((time.perf_counter() - started, open_at_start))

        setattr(cls, name, run)

    timed(claimer.Claimer, "claim_more", "claim", lambda c: c.sender)
    timed(worker.Worker, "_record_if_ready", "record", lambda w: w.sender)
    init = worker.Worker.__init__

    def keep(self, *args, **kwargs):
        init(self, *args, **kwargs)
        workers.append(self)

    worker.Worker.__init__ = keep
    started = time.perf_counter()
    call_command("run_worker", once=True)
    seconds = time.perf_counter() - started
    sent = workers[0].counted.get("sent", 0) if workers else 0
    out = {"seconds": round(seconds, 2), "sent": sent, "per_s": round(sent / seconds) if seconds else None}
    for step, samples in steps.items():
        # Steps that did something: a claim or record that found nothing to do takes microseconds.
        busy = [(s, n) for s, n in samples if s > 0.001]
        out[step] = {
            "turns": len(busy),
            "median_ms": round(1000 * statistics.median(s for s, _ in busy), 2) if busy else None,
            "began_with_none_open": round(sum(1 for _, n in busy if n == 0) / len(busy), 3) if busy else None,
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkout", default=".")
    parser.add_argument("--queued", type=int, default=100_000)
    parser.add_argument("--receiver", default="http://127.0.0.1:18080/webhook")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(traced_worker()))
        return

    from bench import sql
    from bench.locations import POSTGRES, ROOT
    from bench.workloads.queued import seed

    checkout = Path(args.checkout).resolve()
    python = str(checkout / ".venv" / "bin" / "python")
    secret = (checkout / "var" / "secret-key").read_text().strip()
    env = {
        **os.environ,
        "DATABASE_URL": f"{POSTGRES}/{DATABASE}",
        "DJANGO_SECRET_KEY": secret,
        "WEBHOOK_ALLOW_HTTP": "true",
        "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "WEBHOOK_TIMEOUT": "10s",
        "LOG_LEVEL": "WARNING",
        "PYTHONPATH": f"{checkout}:{ROOT}",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    admin = sql.connect(f"{POSTGRES}/postgres")
    admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    admin.execute(f"CREATE DATABASE {DATABASE}")
    subprocess.run(
        [python, "manage.py", "migrate", "--noinput"], cwd=checkout, env=env, check=True, capture_output=True
    )
    columns = subprocess.run(
        [python, "-m", "bench.receiver_columns", args.receiver],
        cwd=checkout,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    stored = json.loads(columns.strip().splitlines()[-1])[args.receiver]
    conn = sql.connect(f"{POSTGRES}/{DATABASE}")
    seed(conn, tag="trace", n=args.queued, url=args.receiver, stored=stored)
    conn.close()
    try:
        traced = subprocess.run(
            [python, str(Path(__file__).resolve()), "--inside"],
            cwd=checkout,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.close()
    print(traced.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
