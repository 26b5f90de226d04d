"""The person's own page with deep history: under 100 ms at 10M events (issue 45, point 3).

bench.sql.yearly_history builds `users` recipients with nine handled years each (a delivery and an
attempt per event), bench.sql.older_history adds nine older years per block to the same people
(full size: 280,000 recipients x 37 events = 10.36M events), then bench/probe_person_page.py times,
in-process, the page opened by a signed link, a change made on it, the data download and a wrong
link's 404. The page reads the person's PENDING events and their choices, never their history:
flat in the table's size.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log
from bench.workload import Workload


@dataclass(frozen=True)
class PersonPageSize:
    person_page_users: int  # recipients with nine handled years each
    person_page_blocks: int  # blocks of nine older years added to the same recipients


SIZES = {
    "small": PersonPageSize(person_page_users=20_000, person_page_blocks=1),
    "full": PersonPageSize(person_page_users=280_000, person_page_blocks=3),
}


def measure(harness: Harness, *, size: PersonPageSize) -> dict:
    conn = harness.conn
    harness.truncate()
    started = time.monotonic()
    log(f"person_page: {size.person_page_users:,} recipients, {9 * (1 + size.person_page_blocks)} years each")
    sql.yearly_history(conn, users=size.person_page_users, due=1000, failed_every=50, deliveries=True)
    for block in range(1, size.person_page_blocks + 1):
        sql.older_history(conn, users=size.person_page_users, block=block, failed_every=50)
    conn.execute("VACUUM ANALYZE users_user, scheduling_event, delivery_delivery, delivery_deliveryattempt")
    (events,) = conn.execute("SELECT count(*) FROM scheduling_event").fetchone()
    built = time.monotonic() - started
    log(f"person_page: {events:,} events (built in {built:.0f} s); timing the page")
    reads = harness.probe("probe_person_page", "20", env=harness.env(), timeout=1800)
    return {
        "events": events,
        "build_s": built,
        "load": os.getloadavg()[0],
        "reads": reads,
        "page_median_ms": reads["page (GET)"]["median_ms"],
    }


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["person_page"]`)."""
    lines = ["## The person's own page at 10M events (issue 45)\n"]
    w = res.get("person_page")
    if w is None:
        return lines + ["_person_page: not run._"]
    if "error" in w:
        return lines + [f"_person_page failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    reads = w["reads"]
    lines.append(
        f"{w['events']:,} events; the person has {reads['their_events']} of them. In-process, median and p95 "
        f"of 20 (load {w['load']:.1f}).\n"
    )
    lines.append("| request | median ms | p95 ms |")
    lines.append("|---|---|---|")
    for name, r in reads.items():
        if isinstance(r, dict):
            lines.append(f"| {name} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} |")
    met = "met" if w["page_median_ms"] < 100 else "**missed**"
    lines.append(f"\nThe page under 100 ms: {met}.\n")
    return lines


WORKLOAD = Workload(name="person_page", measure=measure, sizes=SIZES, repeat_whole=True)
