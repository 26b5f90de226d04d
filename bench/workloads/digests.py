"""A daily digest of 5,000 names rendered per kind: time, body size, names kept within the service's limit (issue 35).

No database and no process: the body a digest's delivery carries is rendered by its kind
(kinds/: `digest_body`) from the standard digest payload, once when the digest is built
and again on a resend. `digests_names` occurrences, each a line as the birthday handler
writes it ("<first> <last>'s birthday", names of various scripts and lengths, some with
characters the kinds escape), rendered `digests_runs` times per kind; the report gives the
median time, the JSON body's bytes, the service's limit, and how many names the message
names before its "… and N more" (the standard body names all: a machine's receiver has no
service limit).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from bench.harness import Harness
from bench.stats import median
from bench.workload import Workload

KINDS = ("standard", "slack", "discord", "teams", "teams_messagecard")
# What each service takes, as kinds/ states it: Slack's text, Discord's content (UTF-16 units),
# a Teams card's body bytes, the MessageCard's too.
LIMITS = {
    "standard": None,
    "slack": "4,000 chars",
    "discord": "2,000 UTF-16",
    "teams": "28 KB",
    "teams_messagecard": "28 KB",
}
FIRST = ("Ada", "Grace", "Zoë", "Łukasz", "Søren", "Anaïs", "Иван", "明", "Mary-Jane", "O'Neil <dev>")
LAST = ("Lovelace", "Hopper", "Müller", "Nakamura", "García Márquez", "Ó Súilleabháin", "*Bold*", "Ng")


@dataclass(frozen=True)
class DigestsSize:
    digests_names: int
    digests_runs: int


SIZES = {
    "small": DigestsSize(digests_names=5_000, digests_runs=3),
    "full": DigestsSize(digests_names=5_000, digests_runs=11),
}


def _payload(n: int) -> dict:
    return {
        "type": "digest",
        "digest_key": "digest-" + "0" * 25,
        "date": "2026-11-27",
        "first_date": "2026-11-27",
        "last_date": "2026-11-29",
        "heading": "Friday 27 November to Sunday 29 November:",
        "occurrences": [
            {
                "event_id": f"0192f000-0000-7000-8000-{i:012d}",
                "event_type": "BIRTHDAY",
                "user_id": f"0192f000-0000-7000-9000-{i:012d}",
                "occurrence_date": "2026-11-28",
                "idempotency_key": f"event-{i:026x}",
                "line": f"{FIRST[i % len(FIRST)]} {LAST[i % len(LAST)]}{i}'s birthday (Saturday)",
            }
            for i in range(n)
        ],
    }


def _names_kept(kind: str, body: dict, n: int) -> int:
    if kind == "standard":
        return len(body["occurrences"])
    return json.dumps(body, ensure_ascii=False).count("'s birthday")


def measure(harness: Harness, *, size: DigestsSize) -> dict:
    from kinds import KINDS

    payload = _payload(size.digests_names)
    kinds = {}
    for kind in KINDS:
        channel = KINDS[kind]
        times = []
        for _ in range(size.digests_runs):
            started = time.perf_counter()
            body = channel.digest_body(payload)
            times.append(time.perf_counter() - started)
        raw = json.dumps(body, ensure_ascii=False).encode()
        kinds[kind] = {
            "ms": median(times) * 1000,
            "bytes": len(raw),
            "names": _names_kept(kind, body, size.digests_names),
            "limit": LIMITS[kind],
        }
    return {"n": size.digests_names, "runs": size.digests_runs, "kinds": kinds}


def report_section(res: dict) -> list[str]:
    """Markdown lines for REPORT.md from the harness's results (`res["digests"]`)."""
    lines = ["## Digests: 5,000 names rendered per kind\n"]
    w = res.get("digests")
    if w is None:
        return lines + ["_digests: not run._"]
    if "error" in w:
        return lines + [f"_digests failed:_\n\n```\n{w['error'][-3000:]}\n```"]
    lines.append(
        f"A digest naming {w['n']:,} occurrences rendered by each kind's `digest_body`, {w['runs']} times each; "
        'median time, the JSON body\'s size, and the names the message shows before its "… and N more".\n'
    )
    lines.append("| kind | ms | body bytes | service limit | names shown |")
    lines.append("|---|---|---|---|---|")
    for kind, k in w["kinds"].items():
        lines.append(f"| {kind} | {k['ms']:.1f} | {k['bytes']:,} | {k['limit'] or 'none'} | {k['names']:,} |")
    lines.append("")
    return lines


WORKLOAD = Workload(name="digests", measure=measure, sizes=SIZES)
