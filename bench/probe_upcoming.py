"""Run with the PRODUCT's venv: the upcoming workload's probe (issue 47).

    DATABASE_URL=... .venv/bin/python -m bench.probe_upcoming [RUNS]

Adds three destinations if missing (a digest at 09:30 Europe/Berlin for everyone, one message
each for team:t1, one for everyone) and a calendar feed of the team's, then times each upcoming
read in-process, as a superuser (Django's test Client, force_login; the API with a DRF token; the
feed with no account): one warm-up, then RUNS requests (5 unless given); prints one JSON line
{read: {"median_ms", "ms": [...]}}. PROBE_ONLY=<text> times only the reads whose name holds it.
"""

import json
import os
import statistics
import sys
import time
from datetime import time as time_of_day

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.urls import reverse  # noqa: E402
from django.utils import timezone  # noqa: E402
from rest_framework.authtoken.models import Token  # noqa: E402

from delivery.destinations.services import destination_url_fields  # noqa: E402
from delivery.models import Destination  # noqa: E402
from delivery.rules.digest_calendar import digest_schedule  # noqa: E402
from delivery.upcoming.feeds import calendar_feed_issue  # noqa: E402


def _destination(name: str, **fields) -> Destination:
    found = Destination.objects.filter(name=name).first()
    if found is not None:
        return found
    made = Destination(name=name, **destination_url_fields(url=f"https://hooks.example.com/{name}"), **fields)
    if made.digest_time is not None:
        digest_schedule(destination=made, now=timezone.now())
    made.save()
    return made


def reads() -> dict[str, tuple[Client, str]]:
    operator, _ = get_user_model().objects.get_or_create(
        username="bench-upcoming", defaults={"is_staff": True, "is_superuser": True}
    )
    token, _ = Token.objects.get_or_create(user=operator)
    console = Client()
    console.force_login(operator)
    api = Client(HTTP_AUTHORIZATION=f"Token {token.key}")
    digest = _destination(
        "bench-digest",
        digest_time=time_of_day(9, 30),
        digest_timezone="Europe/Berlin",
        next_digest_at=timezone.now(),
    )
    team = _destination("bench-team", audience_labels=["team:t1"])
    everyone = _destination("bench-everyone")
    feed_of_everyone = reverse(
        "calendar-feed",
        kwargs={"token": calendar_feed_issue(destination=everyone, operator="bench", now=timezone.now())},
    )
    feed = reverse(
        "calendar-feed",
        kwargs={"token": calendar_feed_issue(destination=team, operator="bench", now=timezone.now())},
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT user_id FROM scheduling_event WHERE status = 'PENDING' ORDER BY target_timestamp_utc LIMIT 1 OFFSET 5000"
        )
        (user_id,) = cursor.fetchone()
    later = api.get("/api/v1/upcoming/").json()
    for _ in range(3):
        later = api.get("/api/v1/upcoming/", {"cursor": later["next_cursor"]}).json()
    admin = "/" + settings.ADMIN_URL
    return {
        "GET /api/v1/upcoming/ (14 days)": (api, "/api/v1/upcoming/"),
        "GET /api/v1/upcoming/, page 5": (api, f"/api/v1/upcoming/?cursor={later['next_cursor']}"),
        "GET /api/v1/upcoming/?days=366&limit=500": (api, "/api/v1/upcoming/?days=366&limit=500"),
        "GET /api/v1/upcoming/?destination=<team:t1>": (api, f"/api/v1/upcoming/?destination={team.pk}"),
        "GET /api/v1/upcoming/?destination=<digest>": (api, f"/api/v1/upcoming/?destination={digest.pk}"),
        "GET /api/v1/upcoming/?label=team:t7": (api, "/api/v1/upcoming/?label=team:t7"),
        "GET /api/v1/upcoming/?type=ANNIVERSARY (none)": (api, "/api/v1/upcoming/?type=ANNIVERSARY"),
        "console upcoming page": (console, f"{admin}upcoming/"),
        "console upcoming, by label": (console, f"{admin}upcoming/?label=team:t7"),
        "per-message destination page (no digests: the page's own cost)": (
            console,
            f"{admin}delivery/destination/{team.pk}/change/",
        ),
        "digest destination page (coming digests)": (
            console,
            f"{admin}delivery/destination/{digest.pk}/change/",
        ),
        "recipient page (next greetings)": (console, f"{admin}users/user/{user_id}/change/"),
        "calendar feed of team:t1 (20,000 people; 1,000 entries at most)": (Client(), feed),
        "calendar feed of everyone (1,000 entries at most)": (Client(), feed_of_everyone),
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    # The test Client's host; the settings' own list is for real requests.
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
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
