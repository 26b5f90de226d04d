"""One worker's turns, traced: where its thread waits on PostgreSQL with nothing in flight (issue 36).

    bench/.venv/bin/python -m bench.turn_trace [--checkout DIR] [--queued N] [--receiver URL]

The `queued` workload times the worker whole; this shows the shape of its turns. It
creates the database `bench_turn_trace`, migrates it with the checkout's `manage.py`,
queues N deliveries (100,000) as the workload does (bench/workloads/queued.py `seed`) to the
bench's nginx `return 200` (bench/receiver.py, started here; or a receiver at `--receiver URL`),
then runs the checkout's `run_worker --once` with its claim (`Claimer.claim_more`) and its
record (`Worker._record_if_ready`) wrapped: each step's wall time, and how many requests
were open when it began. Prints one JSON line: the run's seconds and rate,
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

    from delivery.worker import claimer
    from delivery.worker import loop as worker

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
    parser.add_argument("--receiver", help="a receiver's URL (default: the bench's nginx, started here)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        print(json.dumps(traced_worker()))
        return

    # The bench's own modules need the bench's venv (psutil): not imported in the checkout's Python (--inside).
    from bench.receiver import Receiver

    receiver = None if args.receiver else Receiver().start()
    try:
        print(
            traced_run(
                checkout=Path(args.checkout).resolve(), queued=args.queued, url=args.receiver or receiver.url
            )
        )
    finally:
        if receiver is not None:
            receiver.stop()


def traced_run(*, checkout: Path, queued: int, url: str) -> str:
    """`queued` deliveries to `url`, then the traced worker over them in the checkout's Python; the line it printed."""
    from bench import sql
    from bench.locations import POSTGRES, ROOT
    from bench.workloads.queued import seed

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

    def last_line(*command: str) -> str:
        """The last line `command` prints, run with the checkout's Python in the checkout."""
        out = subprocess.run(
            [python, *command], cwd=checkout, env=env, check=True, capture_output=True, text=True
        ).stdout
        return out.strip().splitlines()[-1] if out.strip() else ""

    last_line("manage.py", "migrate", "--noinput")
    stored = json.loads(last_line("-m", "bench.receiver_columns", url))[url]
    conn = sql.connect(f"{POSTGRES}/{DATABASE}")
    seed(conn, tag="trace", n=queued, url=url, stored=stored)
    conn.close()
    try:
        return last_line(str(Path(__file__).resolve()), "--inside")
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin.close()


if __name__ == "__main__":
    main()
