"""A product's `manage.py`, run with every SQL statement it sends counted (the `queued` workload).

    <product>/.venv/bin/python /path/to/bench/counted_main.py run_worker ...   (cwd: the product's checkout)

pg_stat_statements is not loaded on the bench's server (that takes a restart), so the
statements are counted where they are sent: every psycopg `Cursor.execute`,
`executemany` and `copy` of the process is one, and a claim (an UPDATE of deliveries
whose rows come from `... next_attempt_at <= ... FOR UPDATE SKIP LOCKED`) whose rows were
fetched and were some is one batch. At exit the counts go, as JSON, to `$BENCH_COUNTS_DIR/<pid>.json`.
The counting costs a function call and two substring searches per statement, for the
product of any commit alike.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys
import weakref

import psycopg

counts = {"statements": 0, "claims": 0, "claimed": 0}
# Cursors whose last statement was a claim (psycopg's cursors have slots, no attributes of ours).
claims: weakref.WeakSet = weakref.WeakSet()
_execute, _executemany, _copy = psycopg.Cursor.execute, psycopg.Cursor.executemany, psycopg.Cursor.copy
_fetchall = psycopg.Cursor.fetchall


def _is_claim(query) -> bool:
    text = query if isinstance(query, str) else query.decode() if isinstance(query, bytes) else ""
    return "SKIP LOCKED" in text and "next_attempt_at <=" in text and "UPDATE" in text


def execute(self, query, params=None, **kwargs):
    counts["statements"] += 1
    # A claim's rows are counted when fetched: in a pipeline they arrive after execute returns.
    if _is_claim(query):
        claims.add(self)
    else:
        claims.discard(self)
    return _execute(self, query, params, **kwargs)


def fetchall(self):
    rows = _fetchall(self)
    if self in claims and rows:
        claims.discard(self)
        counts["claims"] += 1
        counts["claimed"] += len(rows)
    return rows


def executemany(self, query, params_seq, **kwargs):
    counts["statements"] += 1
    return _executemany(self, query, params_seq, **kwargs)


def copy(self, statement, params=None, **kwargs):
    counts["statements"] += 1
    return _copy(self, statement, params, **kwargs)


def write_counts() -> None:
    folder = os.environ.get("BENCH_COUNTS_DIR")
    if folder:
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w") as out:
            json.dump(counts, out)


psycopg.Cursor.execute = execute
psycopg.Cursor.executemany = executemany
psycopg.Cursor.copy = copy
psycopg.Cursor.fetchall = fetchall
atexit.register(write_counts)

if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    sys.argv = ["manage.py", *sys.argv[1:]]
    runpy.run_path("manage.py", run_name="__main__")
