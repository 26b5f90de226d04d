"""`manage.py follow_zone_data` over PENDING events first computed by IANA 2023d (issue 21)."""

from __future__ import annotations

import calendar
import csv
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dt_time
from pathlib import Path

from bench import sql
from bench.harness import Harness, log, process_failure
from bench.locations import PRODUCT_PY, RAW, ROOT
from bench.stats import median
from bench.workload import Workload


@dataclass(frozen=True)
class ZoneRulesSize:
    zonerules_events: int  # PENDING events of the imported recipients, the ones the passes follow
    zonerules_due: int  # due events of other recipients, enough for the claims to last through a pass
    zonerules_claim_every_ms: int  # a claim batch of 1,000 this often, before, during and after a pass
    zonerules_window_s: int  # seconds of claims before the pass, and after it


SIZES = {
    "small": ZoneRulesSize(
        zonerules_events=50_000, zonerules_due=80_000, zonerules_claim_every_ms=500, zonerules_window_s=5
    ),
    # A claim of 1,000 every 2 s: 300,000 due events last 600 s, longer than a pass with claims
    # beside it takes on a loaded 2-core machine (bench/results/FINDINGS.md, "bench").
    "full": ZoneRulesSize(
        zonerules_events=1_000_000,
        zonerules_due=300_000,
        zonerules_claim_every_ms=2000,
        zonerules_window_s=20,
    ),
}

# The older IANA database the events are first computed with, installed as
# scheduling/tests/conftest.py installs it: tzdata 2023.4 = IANA 2023d.
OLD_TZDATA_WHEEL, OLD_TZDATA_VERSION = "2023.4", "2023d"
# The claims probe's first calls, left out of its medians: a fresh process's connection, first plans, cold caches.
CLAIMS_WARM_UP = 3
# The recipients' zones, weighted (per mille) roughly like a worldwide audience. Between 2023d
# and newer data, Asia/Almaty and Asia/Qostanay went from UTC+6 to UTC+5 (2024a) and
# America/Asuncion stayed on -03 all year (2025a): the run says which days of the year ahead
# changed by the machine's data (zone_changes), and the product says what it moved.
ZONE_WEIGHTS = {
    "Asia/Kolkata": 100,
    "America/New_York": 100,
    "Asia/Shanghai": 80,
    "America/Los_Angeles": 70,
    "America/Chicago": 60,
    "America/Sao_Paulo": 60,
    "Europe/London": 60,
    "Europe/Berlin": 60,
    "Europe/Paris": 50,
    "America/Mexico_City": 50,
    "Asia/Tokyo": 50,
    "Asia/Jakarta": 50,
    "Europe/Moscow": 40,
    "Africa/Lagos": 40,
    "Asia/Manila": 30,
    "Africa/Cairo": 30,
    "Australia/Sydney": 30,
    "Asia/Almaty": 20,
    "America/Asuncion": 10,
    "Asia/Qostanay": 5,
}


def measure(harness: Harness, *, size: ZoneRulesSize) -> dict:
    """Issue 21: `manage.py follow_zone_data` over `zonerules_events` PENDING events first computed by IANA 2023d.

    The recipients are imported by the product (`import_users`) in a process that computes
    with 2023d only (PYTHONTZPATH and PYTHONPATH, as scheduling/tests/conftest.py does).
    Four passes of the command, each from process start to exit, on a VACUUMed table:
    the first, under 2023d, records it (nothing moves); the real one under the machine's
    data; then every event moves (sql.ZONE_SHIFT, the events said to follow 2023d again),
    twice: alone, then while `probe_retention.py claims` claims batches of 1,000 of
    `zonerules_due` due events of other recipients, before, during and after the pass.
    ZONE_SHIFT is timed each time it builds that case, on the same rows: PostgreSQL's floor.
    """
    n, due = size.zonerules_events, size.zonerules_due
    every, window = size.zonerules_claim_every_ms, size.zonerules_window_s
    conn = harness.conn
    load_at_start = os.getloadavg()
    harness.truncate()
    conn.execute("TRUNCATE scheduling_eventzonedata")
    old = old_tzdata()
    old_env = harness.env(
        PYTHONTZPATH=old / "tzdata" / "zoneinfo",
        PYTHONPATH=os.pathsep.join(filter(None, [str(old), os.environ.get("PYTHONPATH")])),
    )
    new_env = harness.env()
    today = datetime.now(UTC).date()
    path = zonerules_csv(n, today=today)
    log(
        f"zonerules: import_users {n:,} recipients in {len(ZONE_WEIGHTS)} zones, computing with IANA {OLD_TZDATA_VERSION}"
    )
    t = time.monotonic()
    r = harness.manage("import_users", str(path), env=old_env)
    import_s = time.monotonic() - t
    if r.returncode:
        raise process_failure(output=r.stderr, shown=r.stdout + r.stderr)
    log(
        f"zonerules: {due:,} due events of other recipients for the claims, Asia/Almaty by {OLD_TZDATA_VERSION}"
    )
    sql.users_and_events(conn, tag=harness.tag("zr-due"), n=due, target_sql="now() - interval '1 minute'")
    conn.execute(sql.ZONE_DUE_OLD_RULES)
    conn.execute("ANALYZE users_user")
    vacuum_s = {"nothing": vacuum_events(harness)}
    nothing = follow_zone_data(harness, case="nothing", env=old_env)
    if nothing["follows"] != OLD_TZDATA_VERSION or nothing["moved"]:
        raise RuntimeError(
            f"the first pass under {OLD_TZDATA_VERSION} should move nothing: {nothing['output']}"
        )
    vacuum_s["real"] = vacuum_events(harness)
    real = follow_zone_data(harness, case="real", env=new_env)
    changes = zone_changes(
        old_dir=old / "tzdata" / "zoneinfo", new_dir=Path(real["zone_data_path"]), today=today
    )

    # Every event moves, twice: alone, then with claims beside it. Each time ZONE_SHIFT
    # builds the case and is timed: the floor, measured twice on the same rows.
    floors = []
    cases = {}
    for case in ("worst_alone", "worst"):
        vacuum_s[f"{case}_shift"] = vacuum_events(harness)
        log(
            f"zonerules: {case}: ZONE_SHIFT (timed: the floor), then the events follow {OLD_TZDATA_VERSION} again"
        )
        floors.append(sql.zone_shift(conn))
        conn.execute(
            "UPDATE scheduling_eventzonedata SET version = %s, pass_version = '', pass_after_target = NULL, "
            "pass_after_id = NULL, moved = '{}' WHERE id = 1",
            [OLD_TZDATA_VERSION],
        )
        vacuum_s[case] = vacuum_events(harness)
        if case == "worst_alone":
            cases[case] = follow_zone_data(harness, case=case, env=new_env)
    # Files, not pipes: nobody reads a pipe while the pass runs (see the retention workload).
    claims_out, claims_err = RAW / "zonerules_claims.json", RAW / "zonerules_claims.err"
    with open(claims_out, "w") as out_file, open(claims_err, "w") as err_file:
        claims = subprocess.Popen(
            [PRODUCT_PY, "-m", "bench.probe_retention", "claims", "1000", str(every), "0"],
            cwd=ROOT,
            env=new_env,
            stdout=out_file,
            stderr=err_file,
            text=True,
        )
    try:
        time.sleep(3)  # Django's start-up
        probe_warm = time.time()
        time.sleep(window)  # claims with no pass
        if claims.poll() is not None:
            raise RuntimeError("the claims probe stopped before the pass:\n" + claims_err.read_text()[-2000:])
        worst = cases["worst"] = follow_zone_data(harness, case="worst", env=new_env)
        time.sleep(window)
    finally:
        if claims.poll() is None:
            claims.send_signal(signal.SIGTERM)
        claims.wait(timeout=120)
    probe_stopped = time.time()
    errors = claims_err.read_text()
    if claims.returncode:
        raise process_failure(output=errors, shown=errors[-2000:])
    calls = json.loads(claims_out.read_text().strip().splitlines()[-1])["calls"]
    # A fresh process's first calls pay for its connection, first plans and cold caches.
    warm = calls[CLAIMS_WARM_UP:]

    def inside(a: float, b: float) -> list[float]:
        return [
            c["ms"] for c in warm if a <= c["at"] and c["at"] + c["ms"] / 1000 <= b and c["claimed"] == 1000
        ]

    before = inside(probe_warm, worst["spawned"])
    during = inside(worst["pass_started"], worst["pass_completed"])
    after = inside(worst["exited"], probe_stopped)
    process = inside(worst["spawned"], worst["exited"])
    ms_with, ms_without = median(during), median(before + after)
    # The pass starts at the events not yet due; the claims take only due ones: neither touched the other's.
    # The due events are the only ones keyed 'bench-' (sql.users_and_events), their next ones are in UTC.
    # A pass that read one would have moved it to +05:00, claimed since or not (a claim keeps the text).
    checks = dict(
        zip(
            ("due_rows_written_by_a_pass", "imported_events_claimed", "due_claimed", "due_left"),
            conn.execute("""
        SELECT count(*) FILTER (WHERE idempotency_key LIKE 'bench-%%' AND (target_timestamp_local NOT LIKE '%%+06:00'
                                OR (status = 'PENDING' AND version <> 1))),
               count(*) FILTER (WHERE idempotency_key NOT LIKE 'bench-%%' AND target_timezone <> 'UTC'
                                AND status <> 'PENDING'),
               count(*) FILTER (WHERE idempotency_key LIKE 'bench-%%' AND status <> 'PENDING'),
               count(*) FILTER (WHERE idempotency_key LIKE 'bench-%%' AND status = 'PENDING')
        FROM scheduling_event""").fetchone(),
            strict=True,
        )
    )
    floor_s = statistics.mean(s for s, _ in floors)
    floor = {
        "runs_s": [s for s, _ in floors],
        "rows": [n for _, n in floors],
        "seconds": floor_s,
        "rate": floors[0][1] / floor_s,
    }
    for case in (nothing, real, *cases.values()):
        case["vs_floor"] = case["seconds"] / floor_s
        case["pass_vs_floor"] = case["pass_s"] / floor_s
    log(
        f"zonerules: floor {' / '.join(f'{s:.1f}' for s, _ in floors)} s for {floors[0][1]:,} rows; every event "
        f"moves {cases['worst_alone']['seconds']:.1f} s alone, {worst['seconds']:.1f} s with claims; claims "
        f"{ms_or_na(ms_with)} ms with the pass, {ms_or_na(ms_without)} ms without"
    )
    return {
        "events": n,
        "due": due,
        "zones": ZONE_WEIGHTS,
        "zone_changes": changes,
        "old_version": OLD_TZDATA_VERSION,
        "csv": str(path.relative_to(ROOT)),
        "import_s": import_s,
        "import_output": r.stdout.strip(),
        "vacuum_s": vacuum_s,
        "nothing": nothing,
        "real": real,
        **cases,
        "floor": floor,
        "worst_moved_all": [cases["worst_alone"]["moved"], worst["moved"]] == floor["rows"],
        **checks,
        "claim_every_ms": every,
        "window_s": window,
        "claims_warm_up": CLAIMS_WARM_UP,
        "claims": calls,
        "claims_before": len(before),
        "claims_during": len(during),
        "claims_after": len(after),
        "claim_ms_before": median(before),
        "claim_ms_after": median(after),
        "claim_ms_with": ms_with,
        "claim_ms_without": ms_without,
        "claims_process": len(process),
        "claim_ms_process": median(process),
        "ratio": ms_with / ms_without if ms_with and ms_without else None,
        "claims_ran_out": bool(calls) and calls[-1]["claimed"] < 1000,
        "load_at_start": load_at_start,
        "load_at_end": os.getloadavg(),
    }


def vacuum_events(harness: Harness) -> float:
    """VACUUM ANALYZE scheduling_event, so every timed case starts from a table without dead rows; seconds."""
    t = time.monotonic()
    harness.conn.execute("VACUUM ANALYZE scheduling_event")
    return time.monotonic() - t


def follow_zone_data(harness: Harness, *, case: str, env: dict) -> dict:
    """`manage.py follow_zone_data` to its exit, timed from the spawn: what a user waits for, and what it moved."""
    pending = harness.conn.execute(
        "SELECT count(*) FROM scheduling_event WHERE status = 'PENDING' AND target_timestamp_utc >= now()"
    ).fetchone()[0]
    out = RAW / f"zonerules-{case}.log"
    log(f"zonerules: {case}: follow_zone_data over {pending:,} PENDING events not yet due")
    spawned = time.time()
    t = time.monotonic()
    with open(out, "w") as file:
        r = subprocess.run(
            [PRODUCT_PY, "manage.py", "follow_zone_data"],
            cwd=ROOT,
            env=env,
            stdout=file,
            stderr=subprocess.STDOUT,
            timeout=3600,
            check=False,
        )
    seconds = time.monotonic() - t
    exited = time.time()
    text = out.read_text()
    if r.returncode:
        raise process_failure(output=text, shown=text[-2000:])
    data = re.search(r"computes with time zone data (\S+) \((.*)\)\.", text)
    done = re.search(r"Every PENDING event follows (\S+); ([\d,]+) moved now\.", text)
    if not data or not done:
        raise RuntimeError(f"follow_zone_data said something else:\n{text[-2000:]}")
    started, completed = harness.conn.execute(
        "SELECT extract(epoch FROM pass_started_at), extract(epoch FROM pass_completed_at) "
        "FROM scheduling_eventzonedata WHERE id = 1"
    ).fetchone()
    moved = int(done.group(2).replace(",", ""))
    log(f"zonerules: {case}: {moved:,} moved in {seconds:.1f} s ({pending / seconds:,.0f} events/s)")
    return {
        "pending": pending,
        "zone_data": data.group(1),
        "zone_data_path": data.group(2),
        "follows": done.group(1),
        "moved": moved,
        "moved_by_zone": {
            z: int(c.replace(",", "")) for z, c in re.findall(r"^  (\S+): ([\d,]+)$", text, re.M)
        },
        "seconds": seconds,
        "rate": pending / seconds,
        "spawned": spawned,
        "exited": exited,
        "pass_started": float(started),
        "pass_completed": float(completed),
        "pass_s": float(completed) - float(started),
        "output": text.strip(),
    }


def old_tzdata() -> Path:
    """var/tzdata-<wheel>: the older `tzdata` package, pip-installed there once as scheduling/tests/conftest.py does."""
    target = ROOT / "var" / f"tzdata-{OLD_TZDATA_WHEEL}"
    if not (target / "tzdata" / "zoneinfo" / "tzdata.zi").is_file():
        target.parent.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tzdata-"))
        subprocess.run(
            [
                PRODUCT_PY,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-compile",
                "--target",
                str(staging),
                f"tzdata=={OLD_TZDATA_WHEEL}",
            ],
            check=True,
        )
        try:
            staging.rename(target)  # whole or not at all, for a test run beside this one
        except OSError:
            shutil.rmtree(staging)
    return target


def zonerules_csv(n: int, *, today: date) -> Path:
    """n recipients over ZONE_WEIGHTS, born 1940-2009 on any day of the year but the next three.

    No birthday within three days of today: none of these events falls due while the
    workload runs, so the claims never take one (the pass starts at the events not yet due).
    """
    path = RAW / f"zonerules-{n}-{today:%m%d}.csv"
    if path.exists():
        return path
    skip = {((today + timedelta(days=k)).month, (today + timedelta(days=k)).day) for k in range(3)}
    if skip & {(2, 28), (3, 1)}:
        skip.add((2, 29))
    rnd = random.Random(21)
    zones = rnd.choices(list(ZONE_WEIGHTS), weights=list(ZONE_WEIGHTS.values()), k=n)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as file:
        w = csv.writer(file)
        w.writerow(["first_name", "last_name", "date_of_birth", "timezone"])
        for i, zone in enumerate(zones):
            born = None
            while born is None or (born.month, born.day) in skip:
                year = rnd.randint(1940, 2009)
                born = date(year, 1, 1) + timedelta(days=rnd.randrange(366 if calendar.isleap(year) else 365))
            w.writerow(["Zone", f"Recipient{i}", born.isoformat(), zone])
    tmp.rename(path)
    return path


def zone_changes(*, old_dir: Path, new_dir: Path, today: date) -> dict[str, int]:
    """For each zone of ZONE_WEIGHTS, the days of the year ahead whose 09:00 has another UTC offset in new_dir."""
    out = {}
    for name in ZONE_WEIGHTS:
        with open(old_dir / name, "rb") as a, open(new_dir / name, "rb") as b:
            old, new = zoneinfo.ZoneInfo.from_file(a), zoneinfo.ZoneInfo.from_file(b)
        walls = [datetime.combine(today + timedelta(days=d), dt_time(9)) for d in range(366)]
        out[name] = sum(
            1 for w in walls if w.replace(tzinfo=old).utcoffset() != w.replace(tzinfo=new).utcoffset()
        )
    return out


def ms_or_na(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}"


WORKLOAD = Workload(name="zonerules", measure=measure, sizes=SIZES, repeat_whole=True)
