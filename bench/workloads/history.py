"""The operator's reads with 9 years of handled history, with 36, then with ten times the recipients (issue 19)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log
from bench.workload import Workload


@dataclass(frozen=True)
class HistorySize:
    history_users: int  # recipients with nine handled years each
    history_blocks: int  # blocks of nine older years added to the same recipients
    history_recipient_growth: (
        int  # then this many times the recipients, the new ones with a PENDING event only
    )


SIZES = {
    "small": HistorySize(history_users=20_000, history_blocks=3, history_recipient_growth=10),
    "full": HistorySize(history_users=280_000, history_blocks=3, history_recipient_growth=10),
}


def history_reads(harness: Harness) -> dict:
    """Each operator read timed in-process by the product (bench/probe_history.py): median of 5."""
    return harness.probe("probe_history", "5", env=harness.env(), timeout=3600)


def measure(harness: Harness, *, size: HistorySize) -> dict:
    """Operator reads (issue 19) on the same recipients with 9 and with 9 x (1 + blocks) years of handled history.

    bench.sql.yearly_history builds `history_users` recipients, each with nine handled yearly
    occurrences (a delivery and an attempt each; 1 in 50 FAILED and DEAD) and one PENDING (1,000
    of them due); the reads are timed; bench.sql.older_history adds nine older years per block to the
    same recipients, and the reads are timed again. Flat: the ratio at most 1.5.
    """
    users, blocks, growth = size.history_users, size.history_blocks, size.history_recipient_growth
    conn = harness.conn
    harness.truncate()
    sizes = []
    log(f"history: {users:,} recipients with nine handled years each")
    started = time.monotonic()
    sql.yearly_history(conn, users=users, due=1000, failed_every=50, deliveries=True)
    for step in range(3):
        if step == 1:
            log(f"history: {blocks * 9} older years for the same recipients")
            for block in range(1, blocks + 1):
                sql.older_history(conn, users=users, block=block, failed_every=50)
        if step == 2:
            log(f"history: {growth}x the recipients, the new ones with a PENDING event only")
            sql.more_recipients(conn, first=users + 1, last=users * growth)
        conn.execute(
            "VACUUM ANALYZE users_user, scheduling_event, delivery_delivery, delivery_deliveryattempt"
        )
        built = time.monotonic() - started
        events, recipients = conn.execute(
            "SELECT (SELECT count(*) FROM scheduling_event), (SELECT count(*) FROM users_user)"
        ).fetchone()
        log(
            f"history: {events:,} events, {recipients:,} recipients (built in {built:.0f} s); timing the reads"
        )
        sizes.append(
            {
                "events": events,
                "recipients": recipients,
                "build_s": built,
                "relations": harness.relation_sizes(),
                "reads": history_reads(harness),
                "load": os.getloadavg()[0],
            }
        )
        started = time.monotonic()
    small, large, wide = sizes
    ratios = {name: large["reads"][name]["median_ms"] / r["median_ms"] for name, r in small["reads"].items()}
    recipient_ratios = {
        name: wide["reads"][name]["median_ms"] / r["median_ms"] for name, r in large["reads"].items()
    }
    return {
        "users": users,
        "growth": growth,
        "sizes": sizes,
        "ratios": ratios,
        "recipient_ratios": recipient_ratios,
        "worst_ratio": max(ratios.values()),
        "worst_recipient_ratio": max(recipient_ratios.values()),
        "slowest_ms": max(r["median_ms"] for size in sizes for r in size["reads"].values()),
    }


WORKLOAD = Workload(name="history", measure=measure, sizes=SIZES, repeat_whole=True)
