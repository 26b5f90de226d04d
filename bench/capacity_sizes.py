"""Figures behind docs/capacity.md: row and WAL sizes measured, 09:00 bursts computed.

    # the 09:00 bursts (no database): population shares by UTC offset, burst sizes
    .venv/bin/python bench/capacity_sizes.py peaks

    # rows, bytes and WAL of one year of handling, on an empty database of your own
    .venv/bin/python bench/capacity_sizes.py measure --users 200000 --walinspect \
        --database-url postgres://postgres@127.0.0.1:55432/bs_helper_capacity \
        --pg-wal /path/to/data/pg_wal --pg-waldump /usr/lib/postgresql/15/bin/pg_waldump

`measure` runs the product's own code (`--src`, default this checkout; a clean
`git archive HEAD` is steadier while others edit): `manage.py migrate`, then the year
in `--chunks` slices (12: a month each), each slice being
`users.services.users_bulk_create_with_events` with `now` = 364 days ago (so each
recipient's birthday of the past year is overdue), the real `run_scheduler --once`
(EVENT_MAX_LATENESS=400d, so none is too late) and `run_worker --once` (repeated
until nothing is queued), then VACUUM ANALYZE (autovacuum's stand-in). The receiver
is `devtools.sink.WebhookSink` in this process: it answers 503 one to three times
for 2 % of the keys (retries; DELIVERY_RETRY_BASE=1s) and 410 for 0.1 % (DEAD, the
event FAILED). Then: sizes per table and per index; WAL per phase
(pg_current_wal_lsn; with --pg-wal, pg_waldump --stats splits records from
full-page images; with --walinspect, pg_walinspect splits the images by relation);
a cold-page probe (`--probe` random recipients due right after a CHECKPOINT, as at
100M recipients, where no page an event touches was written since the last one);
an emulated one-day prune (DELETE of the oldest 1/365 of the history); the client
connections one long-running scheduler and one worker hold; VACUUM FULL (compact
sizes). WAL is cluster-wide: run it on a private cluster for clean WAL figures. The
database is left as it ends: drop it afterwards. Raw results: `--out` (JSON).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import secrets
import subprocess
import sys
import threading
import time
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

REPO = Path(__file__).resolve().parent.parent

# Population by country, millions, mid-2024: UN World Population Prospects 2024
# (rounded), split across IANA zones by approximate sub-national shares (US: Census
# 2020 states by the zone of most of each state; Indonesia, Russia, Mexico, Canada,
# Australia, Brazil, DR Congo: provincial figures, rounded). An approximation: it
# covers about 99 % of the world's 8,162 million; the rest (small states) is left out.
POPULATION: list[tuple[str, float, dict[str, float]]] = [
    ("India", 1450.9, {"Asia/Kolkata": 1}),
    ("China", 1419.3, {"Asia/Shanghai": 1}),
    (
        "United States",
        345.4,
        {
            "America/New_York": 0.469,
            "America/Chicago": 0.290,
            "America/Denver": 0.050,
            "America/Phoenix": 0.022,
            "America/Los_Angeles": 0.163,
            "America/Anchorage": 0.002,
            "Pacific/Honolulu": 0.004,
        },
    ),
    ("Indonesia", 283.5, {"Asia/Jakarta": 0.805, "Asia/Makassar": 0.165, "Asia/Jayapura": 0.030}),
    ("Pakistan", 251.3, {"Asia/Karachi": 1}),
    ("Nigeria", 232.7, {"Africa/Lagos": 1}),
    ("Brazil", 211.9, {"America/Sao_Paulo": 0.925, "America/Manaus": 0.071, "America/Rio_Branco": 0.004}),
    ("Bangladesh", 173.6, {"Asia/Dhaka": 1}),
    (
        "Russia",
        144.8,
        {
            "Europe/Moscow": 0.668,
            "Europe/Kaliningrad": 0.007,
            "Europe/Samara": 0.055,
            "Asia/Yekaterinburg": 0.117,
            "Asia/Omsk": 0.013,
            "Asia/Novosibirsk": 0.075,
            "Asia/Irkutsk": 0.023,
            "Asia/Yakutsk": 0.014,
            "Asia/Vladivostok": 0.021,
            "Asia/Magadan": 0.005,
            "Asia/Kamchatka": 0.002,
        },
    ),
    ("Ethiopia", 132.1, {"Africa/Addis_Ababa": 1}),
    (
        "Mexico",
        130.9,
        {
            "America/Mexico_City": 0.875,
            "America/Tijuana": 0.030,
            "America/Hermosillo": 0.023,
            "America/Mazatlan": 0.045,
            "America/Cancun": 0.015,
            "America/Ciudad_Juarez": 0.012,
        },
    ),
    ("Japan", 123.8, {"Asia/Tokyo": 1}),
    ("Egypt", 116.5, {"Africa/Cairo": 1}),
    ("Philippines", 115.8, {"Asia/Manila": 1}),
    ("DR Congo", 109.3, {"Africa/Kinshasa": 0.40, "Africa/Lubumbashi": 0.60}),
    ("Viet Nam", 101.0, {"Asia/Ho_Chi_Minh": 1}),
    ("Iran", 91.6, {"Asia/Tehran": 1}),
    ("Turkey", 87.5, {"Europe/Istanbul": 1}),
    ("Germany", 84.6, {"Europe/Berlin": 1}),
    ("Thailand", 71.7, {"Asia/Bangkok": 1}),
    ("United Kingdom", 69.1, {"Europe/London": 1}),
    ("Tanzania", 68.6, {"Africa/Dar_es_Salaam": 1}),
    ("France", 66.5, {"Europe/Paris": 1}),
    ("South Africa", 64.0, {"Africa/Johannesburg": 1}),
    ("Italy", 59.3, {"Europe/Rome": 1}),
    ("Kenya", 56.4, {"Africa/Nairobi": 1}),
    ("Myanmar", 54.5, {"Asia/Yangon": 1}),
    ("Colombia", 52.9, {"America/Bogota": 1}),
    ("South Korea", 51.7, {"Asia/Seoul": 1}),
    ("Sudan", 50.4, {"Africa/Khartoum": 1}),
    ("Uganda", 50.0, {"Africa/Kampala": 1}),
    ("Spain", 47.9, {"Europe/Madrid": 0.953, "Atlantic/Canary": 0.047}),
    ("Algeria", 46.8, {"Africa/Algiers": 1}),
    ("Iraq", 46.0, {"Asia/Baghdad": 1}),
    ("Argentina", 45.7, {"America/Argentina/Buenos_Aires": 1}),
    ("Afghanistan", 42.6, {"Asia/Kabul": 1}),
    ("Yemen", 40.6, {"Asia/Aden": 1}),
    (
        "Canada",
        39.7,
        {
            "America/Toronto": 0.615,
            "America/Halifax": 0.050,
            "America/St_Johns": 0.013,
            "America/Winnipeg": 0.037,
            "America/Regina": 0.030,
            "America/Edmonton": 0.120,
            "America/Vancouver": 0.135,
        },
    ),
    ("Poland", 38.5, {"Europe/Warsaw": 1}),
    ("Morocco", 38.1, {"Africa/Casablanca": 1}),
    ("Angola", 37.9, {"Africa/Luanda": 1}),
    ("Ukraine", 37.9, {"Europe/Kyiv": 1}),
    ("Uzbekistan", 36.4, {"Asia/Tashkent": 1}),
    ("Malaysia", 35.6, {"Asia/Kuala_Lumpur": 1}),
    ("Mozambique", 34.6, {"Africa/Maputo": 1}),
    ("Ghana", 34.4, {"Africa/Accra": 1}),
    ("Peru", 34.2, {"America/Lima": 1}),
    ("Saudi Arabia", 34.0, {"Asia/Riyadh": 1}),
    ("Madagascar", 32.0, {"Indian/Antananarivo": 1}),
    ("Cote d'Ivoire", 31.9, {"Africa/Abidjan": 1}),
    ("Nepal", 29.7, {"Asia/Kathmandu": 1}),
    ("Cameroon", 29.1, {"Africa/Douala": 1}),
    ("Venezuela", 28.4, {"America/Caracas": 1}),
    ("Niger", 27.0, {"Africa/Niamey": 1}),
    (
        "Australia",
        26.7,
        {
            "Australia/Sydney": 0.330,
            "Australia/Melbourne": 0.260,
            "Australia/Brisbane": 0.205,
            "Australia/Hobart": 0.021,
            "Australia/Adelaide": 0.070,
            "Australia/Darwin": 0.009,
            "Australia/Perth": 0.105,
        },
    ),
    ("North Korea", 26.5, {"Asia/Pyongyang": 1}),
    ("Syria", 24.7, {"Asia/Damascus": 1}),
    ("Mali", 24.5, {"Africa/Bamako": 1}),
    ("Burkina Faso", 23.5, {"Africa/Ouagadougou": 1}),
    ("Taiwan", 23.2, {"Asia/Taipei": 1}),
    ("Sri Lanka", 23.1, {"Asia/Colombo": 1}),
    ("Malawi", 21.7, {"Africa/Blantyre": 1}),
    ("Zambia", 21.3, {"Africa/Lusaka": 1}),
    ("Kazakhstan", 20.6, {"Asia/Almaty": 1}),
    ("Chad", 20.3, {"Africa/Ndjamena": 1}),
    ("Chile", 19.8, {"America/Santiago": 1}),
    ("Romania", 19.0, {"Europe/Bucharest": 1}),
    ("Somalia", 19.0, {"Africa/Mogadishu": 1}),
    ("Senegal", 18.5, {"Africa/Dakar": 1}),
    ("Guatemala", 18.4, {"America/Guatemala": 1}),
    ("Netherlands", 18.2, {"Europe/Amsterdam": 1}),
    ("Ecuador", 18.1, {"America/Guayaquil": 1}),
    ("Cambodia", 17.6, {"Asia/Phnom_Penh": 1}),
    ("Zimbabwe", 16.6, {"Africa/Harare": 1}),
    ("Guinea", 14.8, {"Africa/Conakry": 1}),
    ("Benin", 14.5, {"Africa/Porto-Novo": 1}),
    ("Rwanda", 14.3, {"Africa/Kigali": 1}),
    ("Burundi", 14.0, {"Africa/Bujumbura": 1}),
    ("Bolivia", 12.4, {"America/La_Paz": 1}),
    ("Tunisia", 12.3, {"Africa/Tunis": 1}),
    ("South Sudan", 11.9, {"Africa/Juba": 1}),
    ("Haiti", 11.8, {"America/Port-au-Prince": 1}),
    ("Belgium", 11.8, {"Europe/Brussels": 1}),
    ("Jordan", 11.6, {"Asia/Amman": 1}),
    ("Dominican Republic", 11.4, {"America/Santo_Domingo": 1}),
    ("United Arab Emirates", 11.0, {"Asia/Dubai": 1}),
    ("Cuba", 11.0, {"America/Havana": 1}),
    ("Honduras", 10.8, {"America/Tegucigalpa": 1}),
    ("Czechia", 10.7, {"Europe/Prague": 1}),
    ("Sweden", 10.6, {"Europe/Stockholm": 1}),
    ("Tajikistan", 10.6, {"Asia/Dushanbe": 1}),
    ("Papua New Guinea", 10.6, {"Pacific/Port_Moresby": 1}),
    ("Portugal", 10.4, {"Europe/Lisbon": 0.976, "Atlantic/Azores": 0.024}),
    ("Azerbaijan", 10.3, {"Asia/Baku": 1}),
    ("Greece", 10.0, {"Europe/Athens": 1}),
    ("Hungary", 9.7, {"Europe/Budapest": 1}),
    ("Togo", 9.5, {"Africa/Lome": 1}),
    ("Israel", 9.4, {"Asia/Jerusalem": 1}),
    ("Austria", 9.1, {"Europe/Vienna": 1}),
    ("Belarus", 9.1, {"Europe/Minsk": 1}),
    ("Switzerland", 8.9, {"Europe/Zurich": 1}),
    ("Sierra Leone", 8.6, {"Africa/Freetown": 1}),
    ("Laos", 7.8, {"Asia/Vientiane": 1}),
    ("Turkmenistan", 7.5, {"Asia/Ashgabat": 1}),
    ("Hong Kong", 7.4, {"Asia/Hong_Kong": 1}),
    ("Libya", 7.4, {"Africa/Tripoli": 1}),
    ("Kyrgyzstan", 7.2, {"Asia/Bishkek": 1}),
    ("Paraguay", 6.9, {"America/Asuncion": 1}),
    ("Nicaragua", 6.9, {"America/Managua": 1}),
    ("Bulgaria", 6.8, {"Europe/Sofia": 1}),
    ("Serbia", 6.6, {"Europe/Belgrade": 1}),
    ("El Salvador", 6.3, {"America/El_Salvador": 1}),
    ("Congo", 6.3, {"Africa/Brazzaville": 1}),
    ("Denmark", 6.0, {"Europe/Copenhagen": 1}),
    ("Singapore", 5.8, {"Asia/Singapore": 1}),
    ("Lebanon", 5.8, {"Asia/Beirut": 1}),
    ("Finland", 5.6, {"Europe/Helsinki": 1}),
    ("Norway", 5.6, {"Europe/Oslo": 1}),
    ("Liberia", 5.6, {"Africa/Monrovia": 1}),
    ("Slovakia", 5.5, {"Europe/Bratislava": 1}),
    ("Palestine", 5.5, {"Asia/Gaza": 1}),
    ("Central African Republic", 5.3, {"Africa/Bangui": 1}),
    ("Oman", 5.3, {"Asia/Muscat": 1}),
    ("Ireland", 5.3, {"Europe/Dublin": 1}),
    ("New Zealand", 5.2, {"Pacific/Auckland": 1}),
    ("Mauritania", 5.2, {"Africa/Nouakchott": 1}),
    ("Costa Rica", 5.1, {"America/Costa_Rica": 1}),
    ("Kuwait", 4.9, {"Asia/Kuwait": 1}),
    ("Panama", 4.5, {"America/Panama": 1}),
    ("Croatia", 3.9, {"Europe/Zagreb": 1}),
    ("Georgia", 3.8, {"Asia/Tbilisi": 1}),
    ("Eritrea", 3.5, {"Africa/Asmara": 1}),
    ("Mongolia", 3.5, {"Asia/Ulaanbaatar": 1}),
    ("Uruguay", 3.4, {"America/Montevideo": 1}),
    ("Bosnia and Herzegovina", 3.2, {"Europe/Sarajevo": 1}),
    ("Puerto Rico", 3.2, {"America/Puerto_Rico": 1}),
    ("Armenia", 3.0, {"Asia/Yerevan": 1}),
    ("Qatar", 3.0, {"Asia/Qatar": 1}),
    ("Namibia", 3.0, {"Africa/Windhoek": 1}),
    ("Lithuania", 2.9, {"Europe/Vilnius": 1}),
    ("Jamaica", 2.8, {"America/Jamaica": 1}),
    ("Albania", 2.8, {"Europe/Tirane": 1}),
    ("Gambia", 2.8, {"Africa/Banjul": 1}),
    ("Gabon", 2.5, {"Africa/Libreville": 1}),
    ("Botswana", 2.5, {"Africa/Gaborone": 1}),
    ("Lesotho", 2.3, {"Africa/Maseru": 1}),
    ("Guinea-Bissau", 2.2, {"Africa/Bissau": 1}),
    ("Slovenia", 2.1, {"Europe/Ljubljana": 1}),
    ("Equatorial Guinea", 1.9, {"Africa/Malabo": 1}),
    ("Latvia", 1.9, {"Europe/Riga": 1}),
    ("North Macedonia", 1.8, {"Europe/Skopje": 1}),
    ("Bahrain", 1.6, {"Asia/Bahrain": 1}),
    ("Trinidad and Tobago", 1.5, {"America/Port_of_Spain": 1}),
    ("Timor-Leste", 1.4, {"Asia/Dili": 1}),
    ("Estonia", 1.4, {"Europe/Tallinn": 1}),
    ("Cyprus", 1.4, {"Asia/Nicosia": 1}),
    ("Mauritius", 1.3, {"Indian/Mauritius": 1}),
    ("Eswatini", 1.2, {"Africa/Mbabane": 1}),
    ("Djibouti", 1.2, {"Africa/Djibouti": 1}),
    ("Fiji", 0.9, {"Pacific/Fiji": 1}),
]
WORLD_2024_MILLIONS = 8161.97  # UN WPP 2024, mid-2024
DAYS_PER_YEAR = 365.25


def zone_weights(scope: str) -> dict[str, float]:
    """Population (millions) per IANA zone, for the world or the United States only."""
    weights: dict[str, float] = defaultdict(float)
    for country, millions, split in POPULATION:
        if scope == "us" and country != "United States":
            continue
        for zone, share in split.items():
            weights[zone] += millions * share
    return dict(weights)


def offset_shares(scope: str, on: date) -> list[tuple[str, float, list[str]]]:
    """(UTC offset of 09:00 local on `on`, share of the population, largest zones), largest first."""
    weights = zone_weights(scope)
    total = sum(weights.values())
    by_offset: dict[timedelta, list[tuple[float, str]]] = defaultdict(list)
    for zone, weight in weights.items():
        local = datetime(on.year, on.month, on.day, 9, 0, tzinfo=ZoneInfo(zone))
        by_offset[local.utcoffset()].append((weight, zone))
    rows = []
    for offset, members in by_offset.items():
        minutes = int(offset.total_seconds() // 60)
        label = f"UTC{'+' if minutes >= 0 else '-'}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        members.sort(reverse=True)
        rows.append((label, sum(w for w, _ in members) / total, [z for _, z in members[:3]]))
    rows.sort(key=lambda r: -r[1])
    return rows


def peaks(args) -> None:
    per_day = args.recipients / DAYS_PER_YEAR
    covered = sum(zone_weights("world").values())
    print(
        f"population covered: {covered:,.0f} M of {WORLD_2024_MILLIONS:,.0f} M ({covered / WORLD_2024_MILLIONS:.1%})"
    )
    print(f"{args.recipients:,} recipients: {per_day:,.0f} birthdays a day; x1.4 with anniversaries for 40 %")
    for scope in ("world", "us"):
        for on in (date(2026, 1, 15), date(2026, 7, 15)):
            print(f"\n{scope}, 09:00 local on {on}: offset | share | burst (birthdays) | burst x1.4 | zones")
            for label, share, zones in offset_shares(scope, on)[: args.top]:
                print(
                    f"  {label} | {share:6.2%} | {share * per_day:9,.0f} | {share * per_day * 1.4:9,.0f} | {', '.join(zones)}"
                )


def sample_zones(rng: random.Random, n: int) -> list[str]:
    weights = zone_weights("world")
    zones = sorted(weights)
    return rng.choices(zones, weights=[weights[z] for z in zones], k=n)


FIRST = [
    "Wei",
    "Li",
    "Priya",
    "Rahul",
    "Mohammed",
    "Fatima",
    "Maria",
    "José",
    "Anna",
    "John",
    "Aisha",
    "Oluwaseun",
    "Nguyen",
    "Siti",
    "Ahmad",
    "Yuki",
    "Hiroshi",
    "Emma",
    "Liam",
    "Olivia",
    "Noah",
    "Sofia",
    "Mateo",
    "Ananya",
    "Arjun",
    "Chen",
    "Xiaoming",
    "Ivan",
    "Olga",
    "Mehmet",
    "Elif",
    "Kwame",
    "Amara",
    "Lucas",
    "Gabriel",
    "Isabella",
    "Dmitri",
    "Hannah",
    "Kenji",
    "Lakshmi",
]
LAST = [
    "Wang",
    "Li",
    "Zhang",
    "Kumar",
    "Singh",
    "Sharma",
    "Khan",
    "Hossain",
    "Silva",
    "Santos",
    "Smith",
    "Johnson",
    "Williams",
    "Garcia",
    "Martinez",
    "Hernandez",
    "Nguyen",
    "Tran",
    "Kim",
    "Park",
    "Sato",
    "Suzuki",
    "Ivanov",
    "Smirnov",
    "Yilmaz",
    "Kaya",
    "Okafor",
    "Adeyemi",
    "Mohamed",
    "Ibrahim",
    "Müller",
    "Schmidt",
    "Rossi",
    "Dubois",
    "Kowalski",
    "Papadopoulos",
    "Chatterjee",
    "Venkataraman",
    "Fernandes",
    "Hakimi",
]


def _import(args) -> None:
    """Subprocess: create the recipients and their first events with the product's bulk service."""
    sys.path.insert(0, str(Path(args.src).resolve()))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.utils import timezone

    from users.services import users_bulk_create_with_events

    rng = random.Random(20261123 + args.seed)
    zones = sample_zones(rng, args.users)
    start, span = date(1940, 1, 1).toordinal(), (date(2010, 12, 31) - date(1940, 1, 1)).days
    rows = (
        {
            "first_name": rng.choice(FIRST),
            "last_name": rng.choice(LAST),
            "date_of_birth": date.fromordinal(start + rng.randrange(span)),
            "timezone": zones[i],
        }
        for i in range(args.users)
    )
    began = time.perf_counter()
    created = users_bulk_create_with_events(rows=rows, now=timezone.now() - timedelta(days=364))
    print(json.dumps({"created": created, "seconds": round(time.perf_counter() - began, 1)}))


class Measure:
    TABLES = [
        "users_user",
        "scheduling_event",
        "delivery_delivery",
        "delivery_deliveryattempt",
        "runtime_processheartbeat",
    ]

    def __init__(self, args) -> None:
        import psycopg

        self.args = args
        self.conn = psycopg.connect(args.database_url, autocommit=True)
        self.db = self.conn.execute("select current_database()").fetchone()[0]
        self.results: dict = {"started": datetime.now(UTC).isoformat(), "users": args.users, "phases": {}}
        self.src = Path(args.src).resolve()

    def sql(self, query: str, params=()):
        cursor = self.conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []

    def lsn(self) -> str:
        return self.sql("select pg_current_wal_lsn()::text")[0][0]

    def wal_between(self, a: str, b: str) -> int:
        return int(self.sql("select pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", (b, a))[0][0])

    def waldump(self, a: str, b: str) -> dict | None:
        """Record and full-page-image bytes between two LSNs (pg_waldump --stats), if pg_wal is readable."""
        if not self.args.pg_wal:
            return None
        out = subprocess.run(
            [self.args.pg_waldump, "--stats", "-p", self.args.pg_wal, "-s", a, "-e", b],
            capture_output=True,
            text=True,
        )
        for line in out.stdout.splitlines():
            if line.startswith("Total"):
                parts = line.split()
                # Total  count  [pct]  record_size  [pct]  fpi_size  [pct]  combined  [pct]
                nums = [p for p in parts[1:] if not p.startswith("[")]
                return {
                    "records": int(nums[0]),
                    "record_bytes": int(nums[1]),
                    "fpi_bytes": int(nums[2]),
                    "total_bytes": int(nums[3]),
                }
        return {"error": out.stderr.strip()[-300:]}

    def fpi_by_relation(self, a: str, b: str) -> dict:
        """Full-page images between two LSNs by relation (pg_walinspect), this database's blocks only."""
        oid = self.sql("select oid from pg_database where datname = current_database()")[0][0]
        rows = self.sql(
            "with r as (select fpi_length, (regexp_matches(block_ref, 'rel \\d+/' || %s || '/(\\d+) fork main blk \\d+ \\(FPW\\)', 'g'))[1]::oid as node "
            "from pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) where fpi_length > 0) "
            "select coalesce(c.relname, r.node::text), count(*), sum(r.fpi_length) from r "
            "left join pg_class c on c.relfilenode = r.node group by 1 order by 3 desc",
            (str(oid), a, b),
        )
        return {name: {"fpis": int(count), "bytes": int(size)} for name, count, size in rows}

    def env(self, url: str) -> dict:
        env = dict(os.environ)
        env.update(
            {
                "DATABASE_URL": self.args.database_url,
                "WEBHOOK_URL": url,
                "EVENT_MAX_LATENESS": "400d",
                # The receivers are on 127.0.0.1 over http, which the worker refuses unless allowed.
                "WEBHOOK_ALLOW_HTTP": "true",
                "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
                "DELIVERY_RETRY_BASE": "1s",
                "DELIVERY_RETRY_MAX": "2s",
                "LOG_LEVEL": "WARNING",
                "DJANGO_SECRET_KEY": env.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),
            }
        )
        return env

    def manage(self, *argv: str, url: str = "http://127.0.0.1:9/webhook") -> float:
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, str(self.src / "manage.py"), *argv], env=self.env(url), check=True, cwd=self.src
        )
        return time.perf_counter() - began

    def phase(self, name: str, action, handled: int | None = None) -> dict:
        self.sql("checkpoint") if name.startswith("cold") else None
        a = self.lsn()
        began = time.perf_counter()
        extra = action() or {}
        seconds = time.perf_counter() - began
        b = self.lsn()
        result = {"wal_bytes": self.wal_between(a, b), "seconds": round(seconds, 1), "lsn": [a, b], **extra}
        dump = self.waldump(a, b)
        if dump:
            result["waldump"] = dump
        if handled:
            result["handled"] = handled
            result["wal_bytes_per_event"] = round(result["wal_bytes"] / handled)
        self.results["phases"][name] = result
        print(f"{name}: {json.dumps(result)}", flush=True)
        return result

    def sizes(self, label: str) -> dict:
        rels = {}
        for table in self.TABLES:
            rows = self.sql(f"select count(*) from {table}")[0][0]
            heap, table_size, indexes, total, toast = self.sql(
                "select pg_relation_size(c.oid), pg_table_size(c.oid), pg_indexes_size(c.oid), "
                "pg_total_relation_size(c.oid), coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0) "
                "from pg_class c where c.relname = %s",
                (table,),
            )[0]
            width = self.sql(f"select coalesce(avg(pg_column_size(t.*)), 0)::int from {table} t")[0][0]
            idx = {
                name: {"bytes": size, "entries": int(entries)}
                for name, size, entries in self.sql(
                    "select i.relname, pg_relation_size(i.oid), i.reltuples from pg_index x "
                    "join pg_class i on i.oid = x.indexrelid join pg_class t on t.oid = x.indrelid "
                    "where t.relname = %s order by 1",
                    (table,),
                )
            }
            rels[table] = {
                "rows": rows,
                "heap_bytes": heap,
                "table_bytes": table_size,
                "toast_bytes": toast,
                "index_bytes": indexes,
                "total_bytes": total,
                "avg_row_width": width,
                "indexes": idx,
            }
        counts = {
            "events_by_status": dict(self.sql("select status, count(*) from scheduling_event group by 1")),
            "deliveries_by_status": dict(
                self.sql("select status, count(*) from delivery_delivery group by 1")
            ),
            "attempts_by_outcome": dict(
                self.sql("select outcome, count(*) from delivery_deliveryattempt group by 1")
            ),
            "avg_payload_bytes": int(
                self.sql("select coalesce(avg(pg_column_size(payload)), 0) from delivery_delivery")[0][0]
            ),
            "avg_excerpt_bytes": int(
                self.sql(
                    "select coalesce(avg(octet_length(response_excerpt)), 0) from delivery_deliveryattempt"
                )[0][0]
            ),
        }
        self.results[f"sizes_{label}"] = {"relations": rels, **counts}
        print(
            f"sizes {label}: "
            + ", ".join(
                f"{t} {r['rows']:,} rows {r['total_bytes'] / 2**20:.1f} MiB" for t, r in rels.items()
            ),
            flush=True,
        )
        return rels

    def vacuum(self, full: bool = False) -> None:
        for table in self.TABLES:
            self.sql(f"vacuum ({'full, ' if full else ''}analyze) {table}")

    def queued(self) -> int:
        return self.sql("select count(*) from delivery_delivery where status in ('QUEUED', 'SENDING')")[0][0]

    def deliver_all(self, url: str) -> dict:
        runs = 0
        while True:
            self.manage("run_worker", "--once", url=url)
            runs += 1
            if not self.queued():
                return {"worker_runs": runs}
            time.sleep(1.5)  # retries become due after DELIVERY_RETRY_BASE..MAX

    def connections(self, command: list[str], url: str, settle: float) -> dict:
        """Client connections one long-running process holds: the most while it works, and at rest."""
        mine = self.conn.info.backend_pid
        query = (
            "select count(*) from pg_stat_activity where datname = %s and backend_type = 'client backend' "
            "and pid <> %s"
        )
        proc = subprocess.Popen(
            [sys.executable, str(self.src / "manage.py"), *command], env=self.env(url), cwd=self.src
        )
        most, at_rest, began = 0, 0, time.monotonic()
        try:
            while time.monotonic() - began < settle:
                now = self.sql(query, (self.db, mine))[0][0]
                most = max(most, now)
                at_rest = max(at_rest, now) if time.monotonic() - began > settle - 5 else 0
                time.sleep(0.1)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        return {"most": most, "at_rest": at_rest}


def make_sink(src: Path):
    """The product's WebhookSink, answering 503 (1-3 times) for 2 % of keys and 410 for 0.1 %."""
    sys.path.insert(0, str(src))
    # The bench, not the product, reuses the development sink (the ban guards product code).
    from devtools.sink import Reply, WebhookSink  # noqa: TID251

    tries: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def respond(received) -> Reply:
        key = received.idempotency_key
        h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16)
        with lock:
            tries[key] += 1
            n = tries[key]
        if h % 1000 < 20 and n <= 1 + (h // 1000) % 3:
            return Reply(status=503, body=b'{"error":"temporarily unavailable, retry later"}')
        if h % 1000 == 20:
            return Reply(status=410, body=b'{"error":"gone"}')
        return Reply()

    return WebhookSink(respond=respond, keep=1000).start(), tries


def measure(args) -> None:
    m = Measure(args)
    sink, tries = make_sink(m.src)
    url = sink.url
    if args.walinspect:
        m.sql("create extension if not exists pg_walinspect")
    try:
        m.phase("migrate", lambda: {"seconds_cmd": m.manage("migrate", "--verbosity", "0")})

        # The year, in `chunks` slices (a month each by default), each followed by
        # VACUUM ANALYZE: the stand-in for autovacuum, which at 100M rows and the
        # default scale factor (0.2) visits these tables about once a month.
        per_chunk = args.users // args.chunks
        totals: dict[str, int] = defaultdict(int)
        for chunk in range(args.chunks):
            n = per_chunk if chunk < args.chunks - 1 else args.users - per_chunk * (args.chunks - 1)
            before = m.sql("select count(*) from scheduling_event where status <> 'PENDING'")[0][0]

            def do_import(n=n, chunk=chunk):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "_import",
                        "--src",
                        str(m.src),
                        "--users",
                        str(n),
                        "--seed",
                        str(chunk),
                    ],
                    env=m.env(url),
                    check=True,
                    capture_output=True,
                    text=True,
                    cwd=m.src,
                )
                return json.loads(out.stdout.strip().splitlines()[-1])

            tag = f"chunk{chunk + 1:02d}"
            steps = {
                "import": m.phase(f"{tag}_import", do_import),
                "vacuum_import": m.phase(f"{tag}_vacuum_import", m.vacuum),
                "scheduler": m.phase(
                    f"{tag}_scheduler", lambda: {"seconds_cmd": m.manage("run_scheduler", "--once", url=url)}
                ),
                "worker": m.phase(f"{tag}_worker", lambda: m.deliver_all(url)),
                "vacuum": m.phase(f"{tag}_vacuum", m.vacuum),
            }
            handled = m.sql("select count(*) from scheduling_event where status <> 'PENDING'")[0][0] - before
            for step, result in steps.items():
                totals[f"{step}_wal_bytes"] += result["wal_bytes"]
                totals[f"{step}_fpi_bytes"] += result.get("waldump", {}).get("fpi_bytes", 0)
                totals[f"{step}_seconds"] += result["seconds"]
            totals["handled"] += handled
            totals["imported"] += n
            if chunk == args.chunks - 1 and args.walinspect:
                for step in ("scheduler", "worker", "vacuum"):
                    steps[step]["fpi_by_relation"] = m.fpi_by_relation(*steps[step]["lsn"])
                    steps[step]["handled"] = handled
        m.results["year"] = dict(totals)
        m.results["sink"] = {"requests": sum(tries.values()), "keys": len(tries)}
        print("year:", json.dumps(m.results["year"]), flush=True)
        m.sizes("after_year")

        # Cold pages: `probe` random recipients due now, right after a CHECKPOINT:
        # no page they touch was written since, as at 100M recipients.
        probe = args.probe
        m.sql(
            "update scheduling_event set target_timestamp_utc = now() - interval '1 minute' where id in ("
            "select id from scheduling_event where status = 'PENDING' order by random() limit %s)",
            (probe,),
        )
        m.sql("vacuum analyze scheduling_event")
        for name, action in (
            ("cold_scheduler", lambda: {"seconds_cmd": m.manage("run_scheduler", "--once", url=url)}),
            ("cold_worker", lambda: m.deliver_all(url)),
        ):
            result = m.phase(name, action, handled=probe)
            if args.walinspect:
                result["fpi_by_relation"] = m.fpi_by_relation(*result["lsn"])

        # Start-up cost alone (nothing due): heartbeats, the reconcile's look.
        m.phase("startup_scheduler", lambda: {"s": m.manage("run_scheduler", "--once", url=url)})
        m.phase("startup_worker", lambda: {"s": m.manage("run_worker", "--once", url=url)})

        # One day's prune, emulated with SQL: the oldest 1/365 of the handled events,
        # their deliveries and attempts (what a HISTORY_RETENTION prune deletes a day).
        day = max(1, totals["handled"] // 365)

        def prune():
            with m.conn.transaction():
                m.sql(
                    "create temp table gone on commit drop as select id from scheduling_event "
                    "where status <> 'PENDING' order by target_timestamp_utc limit %s",
                    (day,),
                )
                m.sql(
                    "delete from delivery_deliveryattempt a using delivery_delivery d, gone g "
                    "where a.delivery_id = d.id and d.event_id = g.id"
                )
                m.sql("delete from delivery_delivery d using gone g where d.event_id = g.id")
                m.sql("delete from scheduling_event e using gone g where e.id = g.id")
            return {"events_deleted": day}

        for name, action in (("cold_prune_one_day", prune), ("vacuum_after_prune", m.vacuum)):
            result = m.phase(name, action, handled=day)
            if args.walinspect:
                result["fpi_by_relation"] = m.fpi_by_relation(*result["lsn"])

        # Connections held by one long-running process of each kind: while it works
        # through 1,000 due events, and at rest afterwards.
        m.sql(
            "update scheduling_event set target_timestamp_utc = now() - interval '1 minute' where id in ("
            "select id from scheduling_event where status = 'PENDING' order by random() limit 1000)"
        )
        m.results["connections"] = {
            "scheduler (--claimers 2, 1,000 due)": m.connections(["run_scheduler"], url, settle=30),
            "worker (--concurrency 8)": m.connections(["run_worker"], url, settle=60),
        }
        print("connections:", m.results["connections"], flush=True)
        m.vacuum()
        m.sizes("before_full")
        m.phase("vacuum_full", lambda: m.vacuum(full=True))
        m.sizes("compact")
    finally:
        sink.stop()
        m.results["finished"] = datetime.now(UTC).isoformat()
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(m.results, indent=1, default=str))
        print(f"wrote {args.out}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("peaks")
    p.add_argument("--recipients", type=int, default=100_000_000)
    p.add_argument("--top", type=int, default=6)
    p = sub.add_parser("measure")
    p.add_argument("--database-url", required=True)
    p.add_argument("--users", type=int, default=200_000)
    p.add_argument("--probe", type=int, default=1000)
    p.add_argument(
        "--chunks", type=int, default=12, help="slices of the year, each followed by VACUUM ANALYZE"
    )
    p.add_argument("--walinspect", action="store_true", help="break full-page images down by relation")
    p.add_argument("--src", default=str(REPO))
    p.add_argument("--pg-wal", default="", help="the cluster's pg_wal directory, for pg_waldump --stats")
    p.add_argument("--pg-waldump", default="pg_waldump")
    p.add_argument("--out", default=str(REPO / "bench" / "results" / "raw" / "capacity.json"))
    p = sub.add_parser("_import")
    p.add_argument("--src", required=True)
    p.add_argument("--users", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    {"peaks": peaks, "measure": measure, "_import": _import}[args.command](args)


if __name__ == "__main__":
    main()
