"""Run with the PRODUCT's venv: EXPLAIN the scheduler's claim and time one whole claim batch.

    DATABASE_URL=... .venv/bin/python -m bench.probe_claim BATCH REPEATS

The claim function is delivery.dispatch.claim.deliveries_enqueue_due (or, before
that rename, scheduling.services.events_claim_due). Its claim SQL is not rebuilt
here: one call, rolled back, runs under CaptureQueriesContext and the first statement
it executed with SKIP LOCKED is the one EXPLAINed. Prints one JSON object: that SQL,
its EXPLAIN (ANALYZE, BUFFERS) text and execution times, the same SQL timed on a bare
cursor, and the wall time of REPEATS whole calls with batch_size=BATCH.
"""

import json
import os
import re
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

try:
    from delivery.dispatch.claim import deliveries_enqueue_due as claim_due  # noqa: E402

    CLAIM_FUNCTION = "deliveries_enqueue_due"
except (
    ImportError
):  # a checkout older than the claim's move to delivery/, measured for a before/after comparison
    from scheduling.services import events_claim_due as claim_due  # noqa: E402

    CLAIM_FUNCTION = "events_claim_due"


def captured_claim(batch):
    """The statements one call executes (rolled back); the claim is the first with SKIP LOCKED."""
    with transaction.atomic():
        with CaptureQueriesContext(connection) as ctx:
            claim_due(now=timezone.now(), batch_size=batch)
        transaction.set_rollback(True)
    # Django interpolates the parameters into captured_queries as literals: runnable as is.
    statements = [
        q["sql"] for q in ctx.captured_queries if not re.match(r"\s*(RELEASE )?SAVEPOINT\b", q["sql"], re.I)
    ]
    claim = next((s for s in statements if "SKIP LOCKED" in s.upper()), None)
    if claim is None:
        raise RuntimeError(
            f"{CLAIM_FUNCTION} executed no statement with SKIP LOCKED:\n" + "\n".join(statements)
        )
    return claim, statements


def main():
    batch, repeats = int(sys.argv[1]), int(sys.argv[2])
    sql, statements = captured_claim(batch)
    # EXPLAIN (ANALYZE, BUFFERS) several times, each rolled back: the server-side time.
    exec_ms = []
    for _ in range(repeats):
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
        exec_ms.append(float(re.search(r"Execution Time: ([\d.]+) ms", plan).group(1)))
    # The same SQL on a bare cursor (rows fetched as tuples), rolled back: the client round trip.
    sql_ms = []
    rows = 0
    for _ in range(repeats):
        with transaction.atomic():
            with connection.cursor() as cursor:
                started = time.perf_counter()
                cursor.execute(sql)
                rows = len(cursor.fetchall()) if cursor.description else cursor.rowcount
                sql_ms.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    # The whole claim batch, committed: what the scheduler does per batch.
    timings = []
    claimed = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = claim_due(now=timezone.now(), batch_size=batch)
        timings.append((time.perf_counter() - started) * 1000)
        claimed.append(result.claimed)
    print(
        json.dumps(
            {
                "function": CLAIM_FUNCTION,
                "sql": sql,
                "statements": len(statements),
                "explain": plan,
                "ms": timings,
                "claimed": claimed,
                "sql_ms": sql_ms,
                "sql_rows": rows,
                "exec_ms": exec_ms,
            }
        )
    )


if __name__ == "__main__":
    main()
