"""Run with the PRODUCT's venv: the person's own page timed (issue 45, point 3).

    DATABASE_URL=... .venv/bin/python -m bench.probe_person_page [RUNS]

Times in-process (Django's test Client): one warm-up, then RUNS requests (20 unless given) of the
page opened by a signed link (GET), of a change made on it (POST, hide_age toggled: the services'
transaction and the redirect), and of the data download; prints one JSON line {read: {"median_ms",
"p95_ms", "ms": [...]}} and the counts it ran at. The person is taken from the data
bench.sql.yearly_history built: the recipient of a COMPLETED event 5,000 rows into the table, one
of those with the deepest history (36 years with bench.sql.older_history). Three destinations
greet them, made here if missing (everyone, their team's, a daily digest), so the page computes
every kind of line.
"""

import json
import os
import statistics
import sys
import time
from datetime import time as wall

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# The probe's own requests are what is timed, not the throttle's refusals.
os.environ.setdefault("PERSONAL_PAGE_THROTTLE", "1000000/minute")
import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment, teardown_test_environment  # noqa: E402

from delivery.destinations.fields import DestinationSettings  # noqa: E402
from delivery.destinations.services import destination_create  # noqa: E402
from delivery.models import Destination  # noqa: E402
from scheduling.celebration import ChangedBy  # noqa: E402
from users import services  # noqa: E402
from users.models import User  # noqa: E402

DESTINATIONS = (
    DestinationSettings(name="bench-person-general", url="https://general.bench.example.org/hook"),
    DestinationSettings(
        name="bench-person-team", url="https://team.bench.example.org/hook", audience_labels=["team:bench"]
    ),
    DestinationSettings(
        name="bench-person-digest",
        url="https://digest.bench.example.org/hook",
        digest_time=wall(10, 0),
        digest_timezone="Europe/Berlin",
    ),
)


def person() -> User:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT user_id FROM scheduling_event WHERE status = 'COMPLETED' ORDER BY id LIMIT 1 OFFSET 5000"
        )
        (user_id,) = cursor.fetchone()
    user = User.objects.get(pk=user_id)
    if "team:bench" not in user.labels:
        services.user_labels_change(user=user, add=["team:bench"])
    for destination in DESTINATIONS:
        if not Destination.objects.filter(name=destination.name).exists():
            destination_create(settings=destination, operator="bench")
    return user


def timed(runs: int, request) -> dict:
    request()  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        request()
        times.append((time.perf_counter() - started) * 1000)
    ordered = sorted(times)
    return {
        "median_ms": statistics.median(times),
        "p95_ms": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
        "ms": times,
    }


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    user = person()
    path = services.personal_link_issue(user_id=user.pk, issued_by=ChangedBy.OPERATOR, actor="bench").url
    path = path.removeprefix(settings.PUBLIC_BASE_URL.rstrip("/"))
    client = Client()
    page = client.get(path)
    if page.status_code != 200:
        raise SystemExit(f"the page: HTTP {page.status_code}")

    # The form as the page renders it, read once through the test environment (which records each
    # response's context, and slows every rendering: it is torn down before anything is timed).
    setup_test_environment()
    form = client.get(path).context["form"]
    teardown_test_environment()
    fields = {name: ("" if value is None else value) for name, value in form.initial.items()}
    fields.pop("hide_age", None)

    def change() -> float:
        """Toggle hide_age through the page: the services' transaction, then the redirect; its ms."""
        hide, version = User.objects.values_list("hide_age", "version").get(pk=user.pk)
        data = {**fields, "version": version, **({} if hide else {"hide_age": "on"})}
        started = time.perf_counter()
        response = client.post(path, data)
        took = (time.perf_counter() - started) * 1000
        if response.status_code != 302:
            raise SystemExit(f"a change: HTTP {response.status_code}")
        return took

    change()  # warm-up
    posts = [change() for _ in range(runs)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduling_event WHERE user_id = %s", [user.pk])
        (theirs,) = cursor.fetchone()
        cursor.execute("SELECT reltuples::bigint FROM pg_class WHERE relname = 'scheduling_event'")
        (events,) = cursor.fetchone()
    out = {
        "page (GET)": timed(runs, lambda: client.get(path)),
        "a change (POST)": {
            "median_ms": statistics.median(posts),
            "p95_ms": sorted(posts)[min(len(posts) - 1, round(0.95 * (len(posts) - 1)))],
            "ms": posts,
        },
        "my data (GET my-data.json)": timed(runs, lambda: client.get(path + "my-data.json")),
        "wrong link (404)": timed(runs, lambda: client.get("/p/me/not-a-link/")),
        "their_events": theirs,
        "events_estimate": events,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
