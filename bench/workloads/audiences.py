"""The scheduler's claim with 50 audiences against one destination for all (issue 35).

`audiences_n` recipients born on today's date with one BIRTHDAY event each due a minute ago
(bench.sql.users_and_events, as the burst seeds them), the i-th labelled `team:t<i mod 50>`
in both variants, so that only the destinations differ:

- *one for all*: one destination, no audience (every recipient), subscribed to every type;
- *50 audiences*: 50 destinations, the k-th greeting `team:t<k>` alone: each occurrence goes
  to exactly one of them, a fiftieth of the recipients to each.

Both claim the same number of occurrences into the same number of deliveries; what differs is
the claim's choice of destinations (delivery.destinations.audience: the recipient's labels read by the
claim's SELECT, one answer per distinct (type, label set) of a batch). Then `manage.py
run_scheduler --once` as shipped, timed from spawn to exit, and an idle one right after
(start-up, subtracted for the rate without it); nothing is sent (no worker runs). The claimed
count, the delivery count and, for the 50, each destination's count are checked. Rounds take
the two variants in turn, the order alternating; the report gives medians and the ratio of
the 50 audiences' events claimed per second to the one destination's (issue 35: at least 0.8x).
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log
from bench.locations import PRODUCT_PY, RAW, ROOT
from bench.stats import median
from bench.workload import Workload

TEAMS = 50
VARIANTS = ("one for all", f"{TEAMS} audiences")

LABELS = """
UPDATE users_user SET labels = ARRAY['team:t' || mod(substr(first_name, 6)::int, %(teams)s)]::varchar[]
"""


@dataclass(frozen=True)
class AudiencesSize:
    audiences_n: int  # events due per run
    audiences_runs: int  # rounds, both variants in turn within each


SIZES = {
    "small": AudiencesSize(audiences_n=10_000, audiences_runs=1),
    "full": AudiencesSize(audiences_n=100_000, audiences_runs=3),
}


def _destinations(harness: Harness, *, variant: str) -> None:
    harness.conn.execute("TRUNCATE delivery_destination CASCADE")
    if variant == VARIANTS[0]:
        urls = ["http://127.0.0.1:9/all"]
        sql.destinations(harness.conn, columns=list(harness.receiver_columns(*urls).values()))
        return
    urls = [f"http://127.0.0.1:9/team{k}" for k in range(TEAMS)]
    columns = harness.receiver_columns(*urls)
    sql.destinations(harness.conn, columns=[columns[url] for url in urls])
    harness.conn.execute(
        "UPDATE delivery_destination SET audience_labels = ARRAY['team:t' || (substr(name, 7)::int - 1)]::varchar[]"
    )


def _scheduler_once(env: dict, *, log_name: str) -> tuple[float, float]:
    """`run_scheduler --once` to its exit: (seconds from spawn, CPU seconds of the process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with open(RAW / f"{log_name}.log", "w") as out:
        done = subprocess.run(
            [PRODUCT_PY, "manage.py", "run_scheduler", "--once"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    seconds = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"run_scheduler --once exited {done.returncode}; see {RAW / log_name}.log")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def audiences_once(harness: Harness, *, n: int, variant: str, name: str) -> dict:
    harness.seed_due(tag=harness.tag("aud-"), n=n)
    harness.conn.execute(LABELS, {"teams": TEAMS})
    _destinations(harness, variant=variant)
    harness.conn.execute("VACUUM ANALYZE users_user")
    harness.conn.execute("VACUUM ANALYZE scheduling_event")
    env = harness.env(WEBHOOK_URL="", HISTORY_RETENTION="36500d")
    load_before = os.getloadavg()
    seconds, cpu = _scheduler_once(env, log_name=f"audiences-{name}")
    idle_seconds, idle_cpu = _scheduler_once(env, log_name=f"audiences-{name}-idle")
    claimed = harness.conn.execute(
        "SELECT count(*) FROM scheduling_event WHERE status = 'PROCESSING'"
    ).fetchone()[0]
    per_destination = [
        count
        for (count,) in harness.conn.execute(
            "SELECT count(*) FROM delivery_delivery GROUP BY destination_id ORDER BY destination_id"
        ).fetchall()
    ]
    if claimed != n or sum(per_destination) != n:
        raise RuntimeError(f"{variant}: claimed {claimed}, {sum(per_destination)} deliveries, of {n}")
    if variant != VARIANTS[0] and set(per_destination) != {n // TEAMS}:
        raise RuntimeError(
            f"{variant}: deliveries per destination {sorted(set(per_destination))}, not {n // TEAMS}"
        )
    return {
        "variant": variant,
        "n": n,
        "claimed": claimed,
        "destinations": len(per_destination),
        "seconds": seconds,
        "rate": claimed / seconds,
        "idle_seconds": idle_seconds,
        "rate_excl_startup": claimed / max(0.001, seconds - idle_seconds),
        "cpu_ms_per_1000": (cpu - idle_cpu) / claimed * 1_000_000,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def measure(harness: Harness, *, size: AudiencesSize) -> dict:
    n, rounds = size.audiences_n, size.audiences_runs
    runs: dict[str, list] = {variant: [] for variant in VARIANTS}
    for i in range(rounds):
        for variant in VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS)):
            log(f"audiences: {n:,} due, {variant} (round {i + 1}/{rounds}); load {os.getloadavg()[0]:.1f}")
            run = harness.attempt(
                audiences_once,
                harness,
                n=n,
                variant=variant,
                name=f"r{i + 1}-{'one' if variant == VARIANTS[0] else 'teams'}",
            )
            run["round"] = i + 1
            runs[variant].append(run)
            log(
                f"audiences: {variant}: {run['rate']:,.0f} claimed/s from spawn ({run['rate_excl_startup']:,.0f}/s "
                f"without start-up), {run['cpu_ms_per_1000']:.0f} ms CPU per 1,000"
            )
    summary = {
        variant: {
            key: median(run[key] for run in rs)
            for key in ("seconds", "rate", "rate_excl_startup", "cpu_ms_per_1000")
        }
        | {"rates": [run["rate"] for run in rs], "load": [rs[0]["load_before"][0], rs[-1]["load_after"][0]]}
        for variant, rs in runs.items()
    }
    one, many = summary[VARIANTS[0]], summary[VARIANTS[1]]
    paired = [b["rate"] / a["rate"] for a, b in zip(runs[VARIANTS[0]], runs[VARIANTS[1]], strict=True)]
    return {
        "n": n,
        "runs": rounds,
        "product_runs": runs,
        "summary": summary,
        "ratio": many["rate"] / one["rate"],
        "ratio_excl_startup": many["rate_excl_startup"] / one["rate_excl_startup"],
        "ratios_by_round": paired,
    }


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["audiences"]`)."""
    lines = ["## Audiences: the claim with 50 audiences against one destination for all\n"]
    w = res.get("audiences")
    if w is None:
        return lines + ["_audiences: not run._"]
    if "error" in w:
        return lines + [f"_audiences failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    lines.append(
        f"{w['n']:,} events due, each recipient labelled `team:t<i mod 50>`; `run_scheduler --once` as shipped, "
        "spawn to exit (nothing sent), with one destination for everyone or 50 destinations each greeting one "
        f"team (one delivery per occurrence either way). {w['runs']} round(s), the variants in turn; medians.\n"
    )
    lines.append("| variant | s | claimed/s (runs) | without start-up | CPU ms per 1,000 | load |")
    lines.append("|---|---|---|---|---|---|")
    for variant, s in w["summary"].items():
        rates = ", ".join(f"{x:,.0f}" for x in s["rates"])
        lines.append(
            f"| {variant} | {s['seconds']:.1f} | **{s['rate']:,.0f}** ({rates}) | {s['rate_excl_startup']:,.0f} "
            f"| {s['cpu_ms_per_1000']:.0f} | {s['load'][0]:.1f}-{s['load'][1]:.1f} |"
        )
    rounds = ", ".join(f"{x:.2f}x" for x in w["ratios_by_round"])
    lines.append(
        f"\n50 audiences against one for all, events claimed per second: **{w['ratio']:.2f}x** (each round's pair: "
        f"{rounds}; without start-up {w['ratio_excl_startup']:.2f}x); target at least 0.8x: "
        f"{'met' if w['ratio'] >= 0.8 else '**missed**'}.\n"
    )
    return lines


WORKLOAD = Workload(name="audiences", measure=measure, sizes=SIZES)
