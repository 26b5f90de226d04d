"""What is coming (issue 47): the upcoming reads with 10M events and 1M recipients.

bench.sql.yearly_history builds `upcoming_users` recipients, each with nine handled yearly
occurrences and one PENDING later this year (so ten events each: 10M events at 1M recipients),
without deliveries (the upcoming reads never touch them); upcoming_labels gives each recipient
one of 50 team labels. bench/probe_upcoming.py then adds three destinations (a digest at 09:30
Europe/Berlin for everyone, one message each for team:t1, one for everyone) and times each read
in-process: the API list (first page, a later page, 366 days, by destination, by label), the
console's page, a digest destination's page (its coming digests with their names), a recipient's
page, and a destination's calendar feed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from bench import sql
from bench.harness import Harness, log
from bench.workload import Workload


@dataclass(frozen=True)
class UpcomingSize:
    upcoming_users: int  # recipients with ten events each (nine handled, one PENDING)


SIZES = {
    "small": UpcomingSize(upcoming_users=20_000),
    "full": UpcomingSize(upcoming_users=1_000_000),
}


def build(conn, *, users: int) -> None:
    """The recipients and their events, then their labels; analysed."""
    sql.yearly_history(conn, users=users, due=0, failed_every=50, deliveries=False)
    sql.upcoming_labels(conn, teams=50)
    conn.execute("VACUUM ANALYZE users_user, scheduling_event")


def measure(harness: Harness, *, size: UpcomingSize) -> dict:
    harness.truncate()
    log(f"upcoming: {size.upcoming_users:,} recipients with ten events each")
    started = time.monotonic()
    build(harness.conn, users=size.upcoming_users)
    events, recipients = harness.conn.execute(
        "SELECT (SELECT count(*) FROM scheduling_event), (SELECT count(*) FROM users_user)"
    ).fetchone()
    built = time.monotonic() - started
    log(f"upcoming: {events:,} events, {recipients:,} recipients (built in {built:.0f} s); timing the reads")
    reads = harness.probe("probe_upcoming", "5", env=harness.env(), timeout=3600)
    return {
        "events": events,
        "recipients": recipients,
        "build_s": built,
        "reads": reads,
        "load": os.getloadavg()[0],
        "slowest_ms": max(r["median_ms"] for r in reads.values()),
    }


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["upcoming"]`)."""
    lines = ["## What is coming: the upcoming reads (issue 47)\n"]
    w = res.get("upcoming")
    if w is None:
        return lines + ["_upcoming: not run._"]
    if "error" in w:
        return lines + [f"_upcoming failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    lines.append(
        f"{w['events']:,} events, {w['recipients']:,} recipients (built in {w['build_s']:.0f} s; load average "
        f"{w['load']:.1f} at the end). Each read in-process by `bench/probe_upcoming.py`, median of 5 after a "
        "warm-up; target: under 300 ms for the upcoming reads.\n"
    )
    lines.append("| read | median ms | slowest ms |")
    lines.append("|---|---|---|")
    for name, r in w["reads"].items():
        lines.append(f"| {name} | {r['median_ms']:.1f} | {max(r['ms']):.0f} |")
    lines.append("")
    return lines


WORKLOAD = Workload(name="upcoming", measure=measure, sizes=SIZES, repeat_whole=True)
