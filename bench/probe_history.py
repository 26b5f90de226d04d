"""Run with the PRODUCT's venv: the history workload's probe (issue 19).

    DATABASE_URL=... .venv/bin/python -m bench.probe_history [RUNS]

Times each operator read in-process, as a superuser (Django's test Client,
force_login; the API with a DRF token; /metrics from 127.0.0.1): one warm-up,
then RUNS requests (5 unless given); prints one JSON line {read: {"median_ms",
"ms": [...]}} and the ids it used. The rows read are picked from the data
bench.sql.yearly_history built: a COMPLETED event 5,000 rows into the table, its
delivery and recipient, and another event whose key it rewrites to the
product's shape (event-<16 hex>), the shape the console's search matches.
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

SEARCH_KEY = "event-00000000000abcde"


def reads() -> dict[str, tuple[Client, str]]:
    operator, _ = get_user_model().objects.get_or_create(
        username="bench-history", defaults={"is_staff": True, "is_superuser": True}
    )
    token, _ = Token.objects.get_or_create(user=operator)
    console = Client()
    console.force_login(operator)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, user_id FROM scheduling_event WHERE status = 'COMPLETED' ORDER BY id LIMIT 1 OFFSET 5000"
        )
        event_id, user_id = cursor.fetchone()
        cursor.execute("SELECT id FROM delivery_delivery WHERE event_id = %s", [event_id])
        (delivery_id,) = cursor.fetchone()
        cursor.execute("SELECT 1 FROM scheduling_event WHERE idempotency_key = %s", [SEARCH_KEY])
        if cursor.fetchone() is None:
            cursor.execute(
                "SELECT idempotency_key FROM scheduling_event WHERE status = 'COMPLETED' ORDER BY id LIMIT 1 OFFSET 7000"
            )
            (key,) = cursor.fetchone()
            for table in ("scheduling_event", "delivery_delivery"):
                cursor.execute(
                    f"UPDATE {table} SET idempotency_key = %s WHERE idempotency_key = %s", [SEARCH_KEY, key]
                )
    admin = "/" + settings.ADMIN_URL
    events, deliveries = f"{admin}scheduling/event/", f"{admin}delivery/delivery/"
    return {
        "/metrics": (console, "/metrics"),
        "dashboard": (console, f"{admin}dashboard/"),
        "events, first page": (console, events),
        "events, page 5": (console, f"{events}?p=5"),
        "events COMPLETED": (console, f"{events}?status__exact=COMPLETED"),
        "events FAILED": (console, f"{events}?status__exact=FAILED"),
        "events PENDING": (console, f"{events}?status__exact=PENDING"),
        "events overdue": (console, f"{events}?overdue=yes"),
        "events of a type": (console, f"{events}?event_type__exact=BIRTHDAY"),
        "events by key": (console, f"{events}?q={SEARCH_KEY}"),
        "events by name": (console, f"{events}?q=First1234"),
        "event page": (console, f"{events}{event_id}/change/"),
        "deliveries, first page": (console, deliveries),
        "deliveries DELIVERED": (console, f"{deliveries}?status__exact=DELIVERED"),
        "deliveries DEAD": (console, f"{deliveries}?status__exact=DEAD"),
        "deliveries QUEUED": (console, f"{deliveries}?status__exact=QUEUED"),
        "deliveries, lease expired": (console, f"{deliveries}?lease=expired"),
        "deliveries, a permanent failure": (console, f"{deliveries}?attempt_outcome=PERMANENT_FAILURE"),
        "deliveries, an abandoned attempt": (console, f"{deliveries}?attempt_outcome=ABANDONED"),
        "deliveries by key": (console, f"{deliveries}?q={SEARCH_KEY}"),
        "delivery page with attempts": (console, f"{deliveries}{delivery_id}/change/"),
        "recipients": (console, f"{admin}users/user/"),
        "recipients by name": (console, f"{admin}users/user/?q=First1234"),
        "recipient page with events": (console, f"{admin}users/user/{user_id}/change/"),
        "message templates": (console, f"{admin}scheduling/messagetemplate/"),
        "endpoints": (console, f"{admin}delivery/endpoint/"),
        "GET /api/v1/users/": (api, "/api/v1/users/"),
        "GET /api/v1/users/<id>/events/": (api, f"/api/v1/users/{user_id}/events/"),
        # Issue 34's pages. The dashboard's figures are computed on every request here
        # (FIGURES_FOR = 0 in main): its worst case, not the shared cache's hit.
        "landing page (dashboard)": (console, admin),
        "dashboard, live part": (console, f"{admin}dashboard/?fragment=1"),
        "failures by cause, 7 days": (console, f"{admin}failures/"),
        "failures by cause, 24 hours": (console, f"{admin}failures/?window=24h"),
        "destinations": (console, f"{admin}delivery/destination/"),
        "GET /api/v1/failures/": (api, "/api/v1/failures/"),
        "GET /api/v1/destinations-health/": (api, "/api/v1/destinations-health/"),
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    # The test Client's host; the settings' own list is for real requests.
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    from console import dashboard

    dashboard.FIGURES_FOR = 0
    only = os.environ.get("PROBE_ONLY")
    out = {}
    for name, (client, url) in reads().items():
        if only and only not in name:
            continue
        response = client.get(url)
        if response.status_code != 200:
            raise SystemExit(f"{name}: HTTP {response.status_code} from {url}")
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - started) * 1000)
        out[name] = {"median_ms": statistics.median(times), "ms": times}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
