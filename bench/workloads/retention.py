"""`manage.py prune_history` to the end over nine old years per recipient, claims going on beside it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from dataclasses import dataclass

import psycopg

from bench import sql
from bench.harness import Harness, log
from bench.locations import PRODUCT_PY, RAW, ROOT
from bench.stats import median
from bench.workload import Workload


@dataclass(frozen=True)
class RetentionSize:
    retention_events: int  # events in the table: a tenth as many recipients, nine old handled each
    retention_claim_every_ms: int  # a claim batch of 1,000 this often beside the pruner
    retention_window_s: int  # each window of pruning, and of pause, while the turns last
    retention_pairs: int  # turns (one pruning and one paused window each) before it prunes on to the end


SIZES = {
    "small": RetentionSize(
        retention_events=500_000, retention_claim_every_ms=1000, retention_window_s=6, retention_pairs=6
    ),
    "full": RetentionSize(
        retention_events=10_000_000, retention_claim_every_ms=2000, retention_window_s=20, retention_pairs=10
    ),
}


def measure(harness: Harness, *, size: RetentionSize) -> dict:
    """prune_history to the end over nine years of handled history per recipient, all older than
    HISTORY_RETENTION, while claim batches of 1,000 go on at a steady pace beside it.

    The pruner is paused (SIGSTOP) and resumed (SIGCONT) every `retention_window_s`: claims
    while it is paused are the ones "without pruning", measured in the same minutes as those
    "with", so the comparison holds on a shared machine whose load drifts. A paused pruner
    holds at most one batch's row locks, on old handled events no claim touches.
    """
    total = size.retention_events
    users = total // 10
    conn = harness.conn
    harness.truncate()
    log(
        f"retention: building {total:,} events over {users:,} users, {users * 9:,} handled and older than "
        "the retention, each with its delivery and one attempt"
    )
    started = time.monotonic()
    # Two to ten years back, so every handled row is older than 400 days; 1 in 50 FAILED.
    # Every PENDING event is due, so the claims go on as long as they can.
    sql.yearly_history(conn, users=users, due=users, first_year=2, failed_every=50, deliveries=True)
    built = time.monotonic()
    log(f"retention: built in {built - started:.0f} s; VACUUM ANALYZE")
    conn.execute("VACUUM ANALYZE users_user, scheduling_event, delivery_delivery, delivery_deliveryattempt")
    vacuumed = time.monotonic()
    counts_before = dict(
        conn.execute("SELECT status, count(*) FROM scheduling_event GROUP BY status").fetchall()
    )
    sizes_before = harness.relation_sizes()
    env = harness.env(HISTORY_RETENTION="400d")
    log("retention: EXPLAIN of the first two batches' selection (rolled back)")
    plan = harness.probe("probe_retention", "plan", "1000", env=env)
    log("retention: prune_history, paused and resumed in turns, while claim batches go on")
    every = size.retention_claim_every_ms
    # Its output goes to files, not pipes: nobody reads a pipe while the pruner runs, and the
    # probe's one line of JSON for an hour of claims is more than a pipe holds (64 KiB).
    claims_out, claims_err = RAW / "retention_claims.json", RAW / "retention_claims.err"
    with open(claims_out, "w") as out_file, open(claims_err, "w") as err_file:
        claims = subprocess.Popen(
            [PRODUCT_PY, "-m", "bench.probe_retention", "claims", "1000", str(every), "0"],
            cwd=ROOT,
            env=env,
            stdout=out_file,
            stderr=err_file,
            text=True,
        )
    prune_log = RAW / "prune_history.log"
    logged = prune_log.stat().st_size if prune_log.exists() else 0
    prune = harness.processes.spawn(
        "prune_history", ["manage.py", "prune_history", "--batch-size", "1000"], env=env
    )
    # Windows start when the pruner has started pruning (its first line), past Django's start-up.
    while prune.poll() is None and "Deleting" not in prune_log.read_text()[logged:]:
        time.sleep(0.05)
    windows = []  # (start, end, pruning) in epoch seconds
    pruning, start = True, time.time()
    while prune.poll() is None:
        try:
            prune.wait(timeout=size.retention_window_s)
        except subprocess.TimeoutExpired:
            # Turns while claims go on, `retention_pairs` of them; then on to the end.
            alternating = claims.poll() is None and len(windows) < 2 * size.retention_pairs
            if alternating or not pruning:
                prune.send_signal(signal.SIGSTOP if pruning else signal.SIGCONT)
                windows.append((start, time.time(), pruning))
                start, pruning = time.time(), not pruning
    windows.append((start, time.time(), pruning))
    if claims.poll() is None:
        claims.send_signal(signal.SIGTERM)
    claims.wait(timeout=120)
    out, errors = claims_out.read_text(), claims_err.read_text()
    text = prune_log.read_text()[logged:]
    if prune.returncode or claims.returncode:
        raise (
            psycopg.OperationalError(text[-500:] + errors[-500:])
            if "Operational" in text + errors
            else RuntimeError(text[-500:] + errors[-500:])
        )
    done = re.findall(
        r"Deleted ([\d,]+) events, ([\d,]+) deliveries, ([\d,]+) attempts in ([\d,]+) batches, "
        r"([\d.]+) s\.",
        text,
    )[-1]
    events, deliveries, attempts, batches = (int(x.replace(",", "")) for x in done[:4])
    paused_s = sum(b - a for a, b, on in windows if not on)
    # The command's own clock runs while it is paused too.
    prune_s = float(done[4]) - paused_s
    calls = json.loads(out.strip().splitlines()[-1])["calls"]

    def within(spans, pruning_or_not):
        return [
            c["ms"]
            for c in calls
            for a, b, on in spans
            if on == pruning_or_not
            and a <= c["at"]
            and c["at"] + c["ms"] / 1000 <= b
            and c["claimed"] == 1000
        ]

    # The last window, after the turns, is compared with nothing.
    with_pruning, without = within(windows[:-1], True), within(windows[:-1], False)
    all_pruning = within(windows, True)
    sizes_after = harness.relation_sizes()
    counts_after = dict(
        conn.execute("SELECT status, count(*) FROM scheduling_event GROUP BY status").fetchall()
    )
    # Nobody may lose their latest handled occurrence: it is what rescheduling reads.
    unhandled = conn.execute("""
        SELECT count(*) FROM users_user u WHERE NOT EXISTS (
            SELECT 1 FROM scheduling_event e WHERE e.user_id = u.id AND e.status <> 'PENDING')""").fetchone()[
        0
    ]
    t = time.monotonic()
    conn.execute("VACUUM scheduling_event, delivery_delivery, delivery_deliveryattempt")
    vacuum_s = time.monotonic() - t
    sizes_vacuumed = harness.relation_sizes()
    ms_with, ms_without = median(with_pruning), median(without)
    rows = events + deliveries + attempts
    return {
        "events": total,
        "users": users,
        "handled_old": users * 9,
        "build_s": built - started,
        "vacuum_analyze_s": vacuumed - built,
        "status_counts_before": counts_before,
        "status_counts_after": counts_after,
        "users_without_handled_after": unhandled,
        "sizes_before": sizes_before,
        "sizes_after": sizes_after,
        "sizes_vacuumed": sizes_vacuumed,
        "vacuum_s": vacuum_s,
        "plan": plan,
        "uses_history_index": all("event_history_idx" in b["explain"] for b in plan["batches"]),
        "claim_every_ms": every,
        "window_s": size.retention_window_s,
        "windows": windows,
        "claims": calls,
        "claims_with": len(with_pruning),
        "claims_without": len(without),
        "claim_ms_with": ms_with,
        "claim_ms_without": ms_without,
        "claims_pruning_all": len(all_pruning),
        "claim_ms_pruning_all": median(all_pruning),
        "ratio": ms_with / ms_without if ms_with and ms_without else None,
        "pruned": {"events": events, "deliveries": deliveries, "attempts": attempts, "batches": batches},
        "prune_s": prune_s,
        "paused_s": paused_s,
        "prune_rows_per_s": rows / prune_s,
        "prune_events_per_s": events / prune_s,
    }


WORKLOAD = Workload(name="retention", measure=measure, sizes=SIZES, repeat_whole=True)
