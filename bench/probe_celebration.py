"""Run with the PRODUCT's venv: the scheduler's claim with a tenth of the due people private or not celebrated,
against none of them, in turns (issue 45: at least 0.9x the events claimed per second).

    DATABASE_URL=postgres://postgres@127.0.0.1:5433/bench45_celebrant \
        .venv/bin/python -m bench.probe_celebration N ROUNDS

Each run: N recipients (bulk import, as `import_users` writes them) with one BIRTHDAY due a
minute ago, one destination for everyone; in the "10 % chose" variant every tenth recipient
has a choice of their own, alternately private and none (so the claim's LEFT JOIN finds a row
for them, and the claim fails or completes their occurrence instead of queuing a delivery).
Then the claim, delivery.dispatch.claim.deliveries_enqueue_due, in batches of 500 until
nothing is due, timed in-process (no process start-up). Rounds take the variants in turn,
the order alternating. Prints one JSON object: every run and the median ratio. Needs a
database of its own (it truncates the recipients); migrate it first.
"""

import json
import os
import statistics
import sys
import time
from datetime import date, timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from delivery.destinations.services import destination_url_fields  # noqa: E402
from delivery.dispatch.claim import deliveries_enqueue_due  # noqa: E402
from delivery.models import Destination  # noqa: E402
from delivery.states.endpoints import endpoint_for_destination  # noqa: E402
from users.services import users_bulk_create_with_events  # noqa: E402

VARIANTS = ("nobody chose", "10 % chose private or none")
CHOICES = """
INSERT INTO users_celebrationchoice (user_id, event_type, visibility)
SELECT id, 'BIRTHDAY', CASE WHEN mod(n, 20) = 0 THEN 'none' ELSE 'private' END
FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM users_user) numbered WHERE mod(n, 10) = 0
"""


def seed(n: int, *, variant: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE users_user, delivery_destination, delivery_endpoint CASCADE")
    today = timezone.now().date()
    users_bulk_create_with_events(
        rows=(
            {
                "first_name": f"Bench{i}",
                "last_name": "Celebrant",
                "date_of_birth": date(1980 + i % 30, today.month, min(today.day, 28)),
                "timezone": "Europe/Berlin",
            }
            for i in range(n)
        )
    )
    destination = Destination.objects.create(
        name="everyone", **destination_url_fields(url="https://r.example/all")
    )
    endpoint_for_destination(destination=destination)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE scheduling_event SET target_timestamp_utc = %s WHERE status = 'PENDING'",
            [timezone.now() - timedelta(minutes=1)],
        )
        if variant == VARIANTS[1]:
            cursor.execute(CHOICES)
        cursor.execute("VACUUM ANALYZE users_user")
        cursor.execute("VACUUM ANALYZE scheduling_event")
        cursor.execute("VACUUM ANALYZE users_celebrationchoice")


def claim_all() -> tuple[int, float, dict]:
    claimed, outcome = 0, {"queued": 0, "paused": 0, "unsubscribed": 0, "too_late": 0}
    started = time.monotonic()
    while True:
        result = deliveries_enqueue_due(batch_size=500)
        if not result.claimed:
            break
        claimed += result.claimed
        for key in outcome:
            outcome[key] += getattr(result, key)
    return claimed, time.monotonic() - started, outcome


def main() -> None:
    n, rounds = int(sys.argv[1]), int(sys.argv[2])
    runs = []
    for i in range(rounds):
        for variant in VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS)):
            seed(n, variant=variant)
            load = os.getloadavg()[0]
            claimed, seconds, outcome = claim_all()
            if claimed != n:
                raise RuntimeError(f"{variant}: claimed {claimed} of {n}")
            runs.append(
                {
                    "round": i + 1,
                    "variant": variant,
                    "claimed": claimed,
                    "seconds": round(seconds, 2),
                    "rate": round(claimed / seconds),
                    "outcome": outcome,
                    "load_before": load,
                }
            )
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    ratios = [
        next(r["rate"] for r in runs if r["round"] == k and r["variant"] == VARIANTS[1])
        / next(r["rate"] for r in runs if r["round"] == k and r["variant"] == VARIANTS[0])
        for k in range(1, rounds + 1)
    ]
    print(
        json.dumps(
            {"n": n, "rounds": rounds, "runs": runs, "ratios": ratios, "median": statistics.median(ratios)}
        )
    )


if __name__ == "__main__":
    main()
