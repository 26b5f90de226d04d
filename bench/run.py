"""`make bench`: run the workloads against throwaway databases and write the report.

    bench/.venv/bin/python -m bench.run [--size small|full] [--only receivers,scale,...] [--set KEY=N] [--merge]
    bench/.venv/bin/python -m bench.run --list

Each workload is one module of bench/workloads/ (the registry, WORKLOADS, names them all);
the machinery they share is bench/harness.py. The harness starts and stops everything
itself: its own PostgreSQL databases (bench_scheduler, bench_procrastinate, created and
dropped here), an nginx receiver on free 127.0.0.1 ports (bench/receiver.py), the
product's processes from the product's venv (.venv), the baselines from this venv
(bench/.venv). Raw data goes to bench/results/raw/ (not committed), the report to
bench/results/REPORT.md.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import signal
import sys
import time
import traceback
from datetime import UTC, datetime
from typing import Any

from bench.harness import Harness, log
from bench.locations import RAW, RESULTS
from bench.workload import SIZE_NAMES, Workload, sizes_chosen, sizes_flat
from bench.workloads import WORKLOADS


def run_workloads(harness: Harness, *, selected: list[Workload], sizes: dict[str, Any]) -> None:
    """Set up, measure each selected workload in turn (saving results.json after each), tear down."""
    harness.setup()
    try:
        for workload in selected:
            name = workload.name
            log(f"=== {name}")
            t = time.monotonic()
            try:
                if workload.repeat_whole:
                    harness.results[name] = harness.attempt(workload.measure, harness, size=sizes[name])
                else:
                    harness.results[name] = workload.measure(harness, size=sizes[name])
            except Exception:  # noqa: BLE001  one failed workload must not lose the others
                harness.results[name] = {"error": traceback.format_exc()}
                log(f"{name} FAILED:\n{harness.results[name]['error']}")
                harness.processes.stop_all()
            harness.results.setdefault("durations_s", {})[name] = time.monotonic() - t
            harness.save()
            log(f"=== {name} done in {time.monotonic() - t:.0f} s")
    finally:
        harness.results["finished"] = datetime.now(UTC).isoformat()
        harness.save()
        harness.teardown()


def workloads_listed() -> str:
    """Each workload's name, module and what it measures (its module's first docstring line)."""
    lines = []
    for name, workload in WORKLOADS.items():
        module = sys.modules[workload.measure.__module__]
        lines.append(
            f"{name:<13} bench/workloads/{module.__name__.rpartition('.')[2]}.py: "
            f"{module.__doc__.strip().splitlines()[0]}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", choices=SIZE_NAMES, default="full")
    parser.add_argument(
        "--only",
        default=",".join(WORKLOADS),
        help=f"Comma-separated workloads, run in this order: {', '.join(WORKLOADS)} (default: all).",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=N",
        help="Override one size, e.g. --set scale_events=2000000.",
    )
    parser.add_argument(
        "--merge", action="store_true", help="Keep other workloads' results from raw/results.json."
    )
    parser.add_argument(
        "--report-only", action="store_true", help="Re-render REPORT.md from raw/results.json."
    )
    parser.add_argument(
        "--list", action="store_true", help="List the workloads, their modules and what they measure."
    )
    args = parser.parse_args()
    if args.list:
        print(workloads_listed())
        return 0

    if not args.report_only:
        only = [w.strip() for w in args.only.split(",") if w.strip()]
        unknown = [name for name in only if name not in WORKLOADS]
        if unknown:
            raise SystemExit(f"unknown workload {', '.join(unknown)}; one of {', '.join(WORKLOADS)}")
        overrides = {}
        known = sizes_flat(sizes_chosen(WORKLOADS, size=args.size, overrides={}))
        for item in args.set:
            key, _, value = item.partition("=")
            if key not in known:
                raise SystemExit(f"unknown size {key}; one of {', '.join(known)}")
            overrides[key] = int(value)
        sizes = sizes_chosen(WORKLOADS, size=args.size, overrides=overrides)

        RAW.mkdir(parents=True, exist_ok=True)
        lock = open(RAW / ".lock", "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise SystemExit(
                "another bench run holds bench/results/raw/.lock; it shares the bench databases"
            ) from None
        harness = Harness(size=args.size, sizes=sizes_flat(sizes))
        harness.results["command"] = "python -m bench.run " + " ".join(sys.argv[1:])
        if args.merge and (RAW / "results.json").exists():
            old = json.loads((RAW / "results.json").read_text())
            harness.results = {**old, **harness.results}

        def on_signal(signum, frame):
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, on_signal)
        try:
            run_workloads(harness, selected=[w for name, w in WORKLOADS.items() if name in only], sizes=sizes)
        except KeyboardInterrupt:
            log("interrupted: rendering the report from what was measured")
    from bench import report  # matplotlib: imported only when a report is rendered, not for --help or --list

    report.render(json.loads((RAW / "results.json").read_text()), RESULTS)
    log(f"report: {RESULTS / 'REPORT.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
