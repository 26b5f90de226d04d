"""Run with the PRODUCT's venv: EXPLAIN the scheduler's claim and time events_claim_due.

    DATABASE_URL=... .venv/bin/python -m bench.probe_claim BATCH REPEATS

Prints one JSON object: the claim SQL, its EXPLAIN (ANALYZE, BUFFERS) text, and
the wall time of REPEATS calls of events_claim_due(batch_size=BATCH).
"""

import json
import re
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402
from django.utils import timezone  # noqa: E402

from scheduling.models import Event, EventStatus  # noqa: E402
from scheduling.services import events_claim_due  # noqa: E402


def claim_queryset(now, batch):
    # The same queryset events_claim_due builds (scheduling/services.py).
    return (
        Event.objects.filter(status=EventStatus.PENDING, target_timestamp_utc__lte=now)
        .order_by("target_timestamp_utc")
        .select_related("user")
        .select_for_update(skip_locked=True, of=("self",))[:batch]
    )


def main():
    batch, repeats = int(sys.argv[1]), int(sys.argv[2])
    now = timezone.now()
    # EXPLAIN (ANALYZE, BUFFERS) several times, each rolled back: the server-side time.
    exec_ms = []
    for _ in range(repeats):
        with transaction.atomic():
            sql, params = claim_queryset(timezone.now(), batch).query.sql_with_params()
            with connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                plan = "\n".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
        exec_ms.append(float(re.search(r"Execution Time: ([\d.]+) ms", plan).group(1)))
    # The claim SQL on a bare cursor (rows as tuples: no model instances), rolled back.
    sql_ms = []
    for _ in range(repeats):
        with transaction.atomic():
            s, p = claim_queryset(timezone.now(), batch).query.sql_with_params()
            with connection.cursor() as cursor:
                started = time.perf_counter()
                cursor.execute(s, p)
                cursor.fetchall()
                sql_ms.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    # The claim query through the ORM (SELECT ... FOR UPDATE SKIP LOCKED, model instances built), rolled back.
    query_ms = []
    for _ in range(repeats):
        with transaction.atomic():
            started = time.perf_counter()
            rows = list(claim_queryset(timezone.now(), batch))
            query_ms.append((time.perf_counter() - started) * 1000)
            transaction.set_rollback(True)
    timings = []
    claimed = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = events_claim_due(batch_size=batch)
        timings.append((time.perf_counter() - started) * 1000)
        claimed.append(result.claimed)
    print(json.dumps({"sql": sql % tuple(repr(str(p)) for p in params), "explain": plan, "ms": timings, "claimed": claimed,
                      "query_ms": query_ms, "query_rows": len(rows), "sql_ms": sql_ms, "exec_ms": exec_ms}))


if __name__ == "__main__":
    main()
