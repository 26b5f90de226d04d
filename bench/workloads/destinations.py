"""The burst to one destination and to three, every destination subscribed to everything (issue 28).

`destinations_n` events due at once (seeded with SQL as the burst seeds them), then
`run_scheduler` + 2 x `run_worker` as shipped (no `--concurrency`, no `--batch-size`),
each run from no endpoint row, with exactly one or exactly three destination rows
(bench.sql.destinations: subscribed to every type, standard format, no limits, no
secret) and WEBHOOK_URL empty, so that nothing is seeded from the environment. Each
destination is a receiver of its own, a port of the harness's nginx answering 200 at
once with an access log of its own (bench/receiver.py): the one destination of the
first variant is the first of the three. The same processes, settings and receiver
for both; only the number of destination rows differs.

Measured, per run, from the processes' spawn to the last delivery at any destination
(the last line of the three logs): deliveries per second in total and per destination
(each destination's deliveries over spawn to its own last one), the CPU seconds (user +
system, psutil) of the scheduler and both workers over the deliveries, keys twice and
missing at each destination, deliveries not DELIVERED in the database, the load average
before and after. `destinations_runs` rounds, the two variants in turn within each, the
order alternating from one round to the next (1 then 3, then 3 then 1, ...), so that a
load that changes over the rounds weighs on both; the report gives the medians and the
ratio of the three-destination total rate to the one-destination rate (issue 28: at
least 0.8x). `destinations_profile` > 0 records py-spy on the three processes for that
many seconds in the first three-destination run (raw/profile-destinations-*.txt).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log
from bench.locations import RAW
from bench.processes import RssSampler
from bench.profiling import py_spy_record, top_functions
from bench.receiver import DESTINATIONS
from bench.stats import median
from bench.workload import Workload


@dataclass(frozen=True)
class DestinationsSize:
    destinations_n: int  # events due at once per run; each gets one delivery per destination
    destinations_runs: int  # rounds, one and three destinations in turn within each; the report gives medians
    destinations_profile: int  # seconds of py-spy in the first three-destination run (0: none)


SIZES = {
    "small": DestinationsSize(destinations_n=10_000, destinations_runs=1, destinations_profile=0),
    "full": DestinationsSize(destinations_n=100_000, destinations_runs=3, destinations_profile=0),
}

# The variants: how many destinations, all subscribed to every event type.
COUNTS = (1, DESTINATIONS)
# Fewer deliveries/s than this over a whole run would be a failure: the wait gives up then.
SLOWEST_RATE = 15


def destinations_once(harness: Harness, *, n: int, count: int, profile: float = 0) -> dict:
    """n events due at once to `count` destinations, 1 scheduler + 2 workers as shipped; spawn to the last delivery."""
    expected = harness.seed_due(tag=harness.tag(f"dest{count}-"), n=n)
    # Every run from no endpoint row (no state, limit or learned rate left from an earlier one).
    harness.conn.execute("TRUNCATE delivery_endpoint CASCADE")
    urls = [harness.receiver.url_destination(i) for i in range(count)]
    columns = harness.receiver_columns(*urls)
    sql.destinations(harness.conn, columns=[columns[url] for url in urls])
    # The rows above are the only destinations: WEBHOOK_URL would seed none (some exist), but empty says so.
    env = harness.env(WEBHOOK_URL="")
    readers = harness.receiver.destination_readers(count)
    load_before = os.getloadavg()
    started = time.time()
    sched = harness.processes.spawn("scheduler", ["-m", "bench.product_main", "run_scheduler"], env=env)
    ws = [
        harness.processes.spawn("worker", ["-m", "bench.product_main", "run_worker"], env=env)
        for _ in range(2)
    ]
    procs = {"scheduler": sched, **{f"worker{i + 1}": w for i, w in enumerate(ws)}}
    sampler = RssSampler({name: p.pid for name, p in procs.items()})
    sampler.start()
    profilers = []
    if profile:
        time.sleep(3)  # past Django's start-up and the first claims, into the steady state
        profilers = [
            py_spy_record(p.pid, seconds=profile, out=RAW / f"profile-destinations-{name}.txt")
            for name, p in procs.items()
        ]
    seen: list[set[str]] = [set() for _ in readers]
    deadline = time.monotonic() + n * count / SLOWEST_RATE + 120
    try:
        while any(len(s) < n for s in seen) and time.monotonic() < deadline:
            for reader, keys in zip(readers, seen, strict=True):
                before = len(reader.rows)
                reader.poll()
                keys.update(key for _, key, _ in reader.rows[before:] if key in expected)
            dead = [name for name, p in procs.items() if p.poll() is not None]
            if dead:  # say so now rather than wait out the deadline
                raise RuntimeError(
                    f"{', '.join(dead)} exited during the run; see bench/results/raw/scheduler.log "
                    "and worker.log"
                )
            time.sleep(0.1)
        time.sleep(0.3)  # late duplicates, if any, are counted too
        for reader in readers:
            reader.poll()
    finally:
        for p in profilers:
            p.wait()
        peak = sampler.finish()
        harness.processes.stop(list(procs.values()))
    load_after = os.getloadavg()
    per_destination = []
    for i, reader in enumerate(readers):
        counts = reader.count(expected)
        counts.pop("arrivals")
        last = counts["last_arrival"]
        per_destination.append(
            {
                "destination": i + 1,
                **counts,
                "seconds": (last - started) if last else None,
                "rate": counts["unique"] / (last - started) if last else 0.0,
            }
        )
    delivered = sum(d["unique"] for d in per_destination)
    lasts = [d["last_arrival"] for d in per_destination if d["last_arrival"]]
    firsts = [d["first_arrival"] for d in per_destination if d["first_arrival"]]
    seconds = (max(lasts) if lasts else time.time()) - started
    cpu = sum(sampler.cpu.values())
    not_delivered = harness.conn.execute(
        "SELECT count(*) FILTER (WHERE status <> 'DELIVERED'), count(*) FROM delivery_delivery"
    ).fetchone()
    return {
        "n": n,
        "destinations": count,
        "seconds": seconds,
        "deliveries": delivered,
        "rate": delivered / seconds,
        # First to last arrival at any destination: Django's start-up and the first claim left out.
        "steady_rate": (delivered - 1) / (max(lasts) - min(firsts))
        if lasts and max(lasts) > min(firsts)
        else None,
        "per_destination": per_destination,
        "cpu_s": sampler.cpu,
        "cpu_s_total": cpu,
        "cpu_ms_per_delivery": 1000 * cpu / delivered if delivered else None,
        "cpu_ms_per_occurrence": 1000 * cpu / n,
        "duplicates": sum(d["duplicates"] for d in per_destination),
        "missing": sum(d["missing"] for d in per_destination),
        "non_200": sum(d["non_200"] for d in per_destination),
        "not_delivered": not_delivered[0],
        "delivery_rows": not_delivered[1],
        "peak_rss_mb": peak,
        "load_before": load_before,
        "load_after": load_after,
        "profile": {name: top_functions(RAW / f"profile-destinations-{name}.txt") for name in procs}
        if profile
        else None,
    }


def measure(harness: Harness, *, size: DestinationsSize) -> dict:
    """Both variants each round, in alternating order; medians and the ratio of three to one."""
    n, rounds = size.destinations_n, size.destinations_runs
    runs: dict[str, list] = {str(count): [] for count in COUNTS}
    profiled = False
    for i in range(rounds):
        order = COUNTS if i % 2 == 0 else tuple(reversed(COUNTS))
        for count in order:
            profile = size.destinations_profile if count > 1 and not profiled else 0
            profiled = profiled or bool(profile)
            log(
                f"destinations: {n:,} events due at once to {count} destination(s), 1 scheduler + 2 workers as "
                f"shipped (round {i + 1}/{rounds}); load {os.getloadavg()[0]:.1f}"
            )
            run = harness.attempt(destinations_once, harness, n=n, count=count, profile=profile)
            run["round"] = i + 1
            runs[str(count)].append(run)
            each = ", ".join(f"{d['rate']:,.0f}" for d in run["per_destination"])
            log(
                f"destinations: {count}: {run['rate']:,.0f} deliveries/s in total ({run['seconds']:.1f} s; per "
                f"destination {each}), CPU "
                f"{run['cpu_ms_per_delivery'] or 0:.3f} ms/delivery, duplicates {run['duplicates']}, missing "
                f"{run['missing']}, not DELIVERED {run['not_delivered']}; load {run['load_after'][0]:.1f}"
            )
    summary = {key: summarize(rs) for key, rs in runs.items()}
    one, three = summary[str(COUNTS[0])], summary[str(COUNTS[1])]
    # Each round's two runs saw about the same load: their ratio is the paired figure.
    paired = [
        b["rate"] / a["rate"]
        for a, b in zip(runs[str(COUNTS[0])], runs[str(COUNTS[1])], strict=True)
        if a["rate"]
    ]
    return {
        "n": n,
        "runs": rounds,
        "counts": list(COUNTS),
        "product_runs": runs,
        "summary": summary,
        "ratio": three["rate"] / one["rate"] if one["rate"] else None,
        "ratio_steady": three["steady_rate"] / one["steady_rate"]
        if one["steady_rate"] and three["steady_rate"]
        else None,
        "ratios_by_round": paired,
        "ratio_median_of_rounds": median(paired),
        "cpu_ratio": three["cpu_ms_per_delivery"] / one["cpu_ms_per_delivery"]
        if one["cpu_ms_per_delivery"]
        else None,
        "command": harness.results.get("command"),
    }


def summarize(runs: list[dict]) -> dict:
    count = runs[0]["destinations"]
    return {
        "destinations": count,
        "n": runs[0]["n"],
        "runs": len(runs),
        "seconds": median(r["seconds"] for r in runs),
        "rate": median(r["rate"] for r in runs),
        "rates": [r["rate"] for r in runs],
        "steady_rate": median(r["steady_rate"] for r in runs),
        "per_destination_rate": [median(r["per_destination"][i]["rate"] for r in runs) for i in range(count)],
        "cpu_ms_per_delivery": median(r["cpu_ms_per_delivery"] for r in runs),
        "cpu_ms_per_deliveries": [r["cpu_ms_per_delivery"] for r in runs],
        "cpu_ms_per_occurrence": median(r["cpu_ms_per_occurrence"] for r in runs),
        "duplicates": sum(r["duplicates"] for r in runs),
        "missing": sum(r["missing"] for r in runs),
        "non_200": sum(r["non_200"] for r in runs),
        "not_delivered": sum(r["not_delivered"] for r in runs),
        "peak_rss_mb": {k: max(r["peak_rss_mb"].get(k, 0) for r in runs) for k in runs[0]["peak_rss_mb"]},
        "load": [min(r["load_before"][0] for r in runs), max(r["load_after"][0] for r in runs)],
    }


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["destinations"]`)."""
    lines = ["## Destinations: the burst to one destination and to three\n"]
    w = res.get("destinations")
    if w is None:
        return lines + ["_destinations: not run._"]
    if "error" in w:
        return lines + [f"_destinations failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    lines.append(
        f"{w['n']:,} events due at once, `run_scheduler` + 2 x `run_worker` as shipped (no `--concurrency`, no "
        "`--batch-size`), each run from no endpoint row, with one or three destination rows subscribed to every type "
        "(standard format, no limits, no secret) and nothing else changed: each destination is a port of the bench's "
        "nginx of its own answering 200 at once, with its own access log (the one destination is the first of the "
        f"three). {w['runs']} round(s), the two variants in turn within each, the order alternating; medians. "
        "*Rate* = deliveries / (last delivery at any destination - spawn); *per destination* = its deliveries / (its "
        "last - spawn); *CPU* = user + system seconds of the scheduler and both workers over the deliveries.\n"
    )
    lines.append(
        "| destinations | time s | deliveries/s in total (runs) | per destination | steady /s "
        "| CPU ms / delivery (runs) | CPU ms / occurrence | twice / missing / non-200 / not DELIVERED "
        "| load (1 min) |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for s in w["summary"].values():
        rates = ", ".join(f"{x:,.0f}" for x in s["rates"])
        each = ", ".join(f"{x:,.0f}" for x in s["per_destination_rate"])
        cpus = ", ".join(f"{x:.3f}" for x in s["cpu_ms_per_deliveries"])
        lines.append(
            f"| {s['destinations']} | {s['seconds']:.1f} | **{s['rate']:,.0f}** ({rates}) | {each} "
            f"| {s['steady_rate'] or 0:,.0f} | {s['cpu_ms_per_delivery']:.3f} ({cpus}) | {s['cpu_ms_per_occurrence']:.3f} "
            f"| {s['duplicates']} / {s['missing']} / {s['non_200']} / {s['not_delivered']} "
            f"| {s['load'][0]:.1f}-{s['load'][1]:.1f} |"
        )
    rounds = ", ".join(f"{x:.2f}x" for x in w["ratios_by_round"])
    lines.append(
        f"\nThree destinations against one, total deliveries/s: **{w['ratio']:.2f}x** (medians; each round's pair: "
        f"{rounds}; steady rates {w['ratio_steady'] or 0:.2f}x); target at least 0.8x: "
        f"{'met' if w['ratio'] >= 0.8 else '**missed**'}. CPU per delivery, three against one: "
        f"{w['cpu_ratio'] or 0:.2f}x.\n"
    )
    return lines


WORKLOAD = Workload(name="destinations", measure=measure, sizes=SIZES)
