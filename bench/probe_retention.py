"""Run with the PRODUCT's venv: the retention workload's probes.

    DATABASE_URL=... .venv/bin/python -m bench.probe_retention plan BATCH
    DATABASE_URL=... .venv/bin/python -m bench.probe_retention claims BATCH EVERY_MS COUNT

plan: the first two batches of delivery.dispatch.retention.history_prune_batches run
once under CaptureQueriesContext and are rolled back; prints each batch's statements
and the EXPLAIN (ANALYZE, BUFFERS) of each batch's selection (the first batch's has
no position yet, the second continues after the first's last row), also rolled back.

claims: calls delivery.dispatch.claim.deliveries_enqueue_due(batch_size=BATCH) every
EVERY_MS milliseconds, COUNT times (0: until SIGTERM), stopping early when a call
comes back short (nothing more due); prints each call's start (epoch seconds), wall
time and events claimed.
"""

import json
import os
import re
import signal
import sys
import threading
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from delivery.dispatch.claim import deliveries_enqueue_due  # noqa: E402
from delivery.dispatch.retention import history_cutoff, history_prune_batches  # noqa: E402


def plan(batch: int) -> dict:
    cutoff = history_cutoff(now=timezone.now())
    batches = []
    with transaction.atomic():
        pruning = history_prune_batches(cutoff=cutoff, batch_size=batch)
        for _ in range(2):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                done = next(pruning, None)
                ms = (time.perf_counter() - started) * 1000
            if done is None:
                break
            statements = [
                q["sql"] for q in ctx.captured_queries if not re.match(r"\s*(RELEASE )?SAVEPOINT\b", q["sql"])
            ]
            batches.append(
                {
                    "statements": statements,
                    "ms": ms,
                    "events": done.events,
                    "deliveries": done.deliveries,
                    "attempts": done.attempts,
                }
            )
        transaction.set_rollback(True)
    for b in batches:
        select = next(s for s in b["statements"] if "SKIP LOCKED" in s)
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + select)
                b["explain"] = "\n".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
        b["select"] = select
    return {"batches": batches}


def claims(batch: int, every_ms: int, count: int) -> dict:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    calls = []
    while not stop.is_set() and (count == 0 or len(calls) < count):
        started = time.time()
        t = time.perf_counter()
        result = deliveries_enqueue_due(now=timezone.now(), batch_size=batch)
        calls.append({"at": started, "ms": (time.perf_counter() - t) * 1000, "claimed": result.claimed})
        if result.claimed < batch:
            break
        stop.wait(max(0.0, every_ms / 1000 - (time.time() - started)))
    return {"calls": calls}


def main():
    mode, args = sys.argv[1], [int(a) for a in sys.argv[2:]]
    print(json.dumps(plan(*args) if mode == "plan" else claims(*args)))


if __name__ == "__main__":
    main()
