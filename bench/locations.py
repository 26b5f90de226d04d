"""Where the bench finds the product, the two interpreters, its results and its databases."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The product's processes run from the product's venv; the bench's own clients
# (raw_client, proc_peer, py-spy) from the one the harness runs in (bench/.venv).
PRODUCT_PY = str(ROOT / ".venv" / "bin" / "python")
BENCH_PY = sys.executable
RESULTS = ROOT / "bench" / "results"
# Raw data and logs, not committed: results.json, each process's log, py-spy output.
RAW = RESULTS / "raw"
POSTGRES = "postgres://postgres@127.0.0.1:5432"
# BENCH_DATABASE_PREFIX: another checkout's bench on the same server must use other
# databases, or each run's setup and teardown would drop the other's.
PRODUCT_DATABASE = os.environ.get("BENCH_DATABASE_PREFIX", "bench") + "_scheduler"
PROCRASTINATE_DATABASE = os.environ.get("BENCH_DATABASE_PREFIX", "bench") + "_procrastinate"
PRODUCT_DSN = f"{POSTGRES}/{PRODUCT_DATABASE}"
PROCRASTINATE_DSN = f"{POSTGRES}/{PROCRASTINATE_DATABASE}"
