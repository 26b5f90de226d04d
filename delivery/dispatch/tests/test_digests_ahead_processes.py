"""A week-ahead digest and a weekly digest for real: once per period through a SIGKILLed worker and a PostgreSQL
restart, counted at a local receiver.

run_scheduler and run_worker processes on a private cluster (the shared one is never
restarted). The digest's time is brought to now, as if its morning had come; the rest
is the product's own. While the digest's request is at the receiver the worker is
SIGKILLed and PostgreSQL restarted; another worker takes the lease back and sends it
again. Then a second date of the same period is brought due (the same date for a daily
digest, another day of the ISO week for a weekly one): the scheduler builds nothing.
The receiver counts one key, every copy of it the same body, naming the right people.
"""

import json
import signal
import time as clock

import pytest

from delivery.models import Delivery, Destination, Digest
from delivery.tests.pipeline import ScriptedSink, process_env, start_process, stop_all, wait_until
from delivery.tests.test_outage import manage, private_postgres  # noqa: F401, F811 - the fixture
from devtools.sink import Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

# Runs inside `manage.py shell` on the private cluster: a Slack digest destination at the receiver
# with the settings given, due in two seconds on today's date (Berlin), and recipients born on the
# days after it (by offset), each named "Day<offset>".
CREATE = """
from datetime import date, time, timedelta
from django.utils import timezone
from delivery.models import Destination
from delivery.destinations.services import destination_url_fields
from delivery.states.endpoints import endpoint_for_destination
from scheduling.times import load_timezone
from users.models import User

today = timezone.now().astimezone(load_timezone("Europe/Berlin")).date()
for offset in {offsets!r}:
    day = today + timedelta(days=offset)
    User.objects.create(
        first_name=f"Day{{offset}}", last_name="Ahead", date_of_birth=date(1985, day.month, day.day),
        timezone="Europe/Berlin",
    )
destination = Destination.objects.create(
    name="ahead", **destination_url_fields(url={url!r}, format="slack"), format="slack",
    digest_time=time(9, 0), digest_timezone="Europe/Berlin", max_rate=50,
    next_digest_date=today, next_digest_at=timezone.now() + timedelta(seconds=2), **{settings!r},
)
endpoint_for_destination(destination=destination)
print(today.isoformat())
"""

CASES = {
    # A week ahead: today's digest names the people of the date a week on, no one else.
    "week ahead": ({"digest_days_ahead": 7}, [6, 7, 8], ["Day7 Ahead's birthday"], "In a week, "),
    # Weekly on today's weekday: the seven days from today, each line with its day.
    "weekly": (
        {"digest_weekday": "WEEKDAY"},
        [1, 6, 7],
        ["Day1 Ahead's birthday", "Day6 Ahead's birthday"],
        "The coming seven days, ",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_an_ahead_or_weekly_digest_goes_once_per_period_through_a_sigkill_and_a_postgresql_restart(
    case,
    private_postgres,  # noqa: F811
    delivery_settings,
    tmp_path,
):
    from datetime import date, timedelta

    from delivery.models import WEEKDAYS

    settings, offsets, named, heading = CASES[case]
    cluster = private_postgres
    delivery_settings.WEBHOOK_URL = ""
    with ScriptedSink() as sink:
        # given the destination, its digest due in two seconds; the receiver holds the first request long
        # enough for it to be killed
        sink.default = Reply(status=200, delay=20)
        env = process_env(delivery_settings, DATABASE_URL=cluster.database_url)
        if "digest_weekday" in settings:
            today = date.fromisoformat(
                cluster.query("SELECT to_char((now() AT TIME ZONE 'Europe/Berlin')::date, 'YYYY-MM-DD')")[0][
                    0
                ]
            )
            settings = {"digest_weekday": WEEKDAYS[today.weekday()]}
        created = manage(
            ["shell", "-c", CREATE.format(offsets=offsets, url=sink.url, settings=settings)],
            cluster.database_url,
            env=process_env(delivery_settings),
        )
        day = date.fromisoformat(created.stdout.strip().splitlines()[-1])
        scheduler = start_process(["run_scheduler"], env, tmp_path / "scheduler.log")
        doomed = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "doomed.log")
        processes = [scheduler]
        table = Destination._meta.db_table

        def delivered() -> int:
            try:
                return cluster.query(
                    f"SELECT count(*) FROM {Delivery._meta.db_table} WHERE status = 'DELIVERED'"
                )[0][0]
            except Exception:  # noqa: BLE001 - the cluster is coming back
                return -1

        try:
            # when the worker is SIGKILLed while the digest is at the receiver, and PostgreSQL restarts
            wait_until(lambda: len(sink.received) >= 1, 60, "the digest to reach the receiver")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=10)
            cluster.stop()
            cluster.start()
            sink.default = Reply(status=200)
            processes.append(
                start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "rescuer.log")
            )
            wait_until(lambda: delivered() == 1, 90, "the digest to be taken over and delivered")

            # and another date of the same period comes due: the same date (daily), another day of its week
            again = day
            if "digest_weekday" in settings:
                # The next day, or the one before for a Sunday: its seven days share one with today's,
                # on which someone is born, so a digest of it would name them.
                again = day + timedelta(days=1 if day.weekday() != 6 else -1)
            cluster.query(
                f"UPDATE {table} SET next_digest_date = %s, next_digest_at = now() RETURNING id", [again]
            )
            wait_until(
                lambda: cluster.query(f"SELECT next_digest_date FROM {table}")[0][0] > max(day, again),
                60,
                "the scheduler to pass the period's second date",
            )
            clock.sleep(3)  # a second digest would reach the receiver by now
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    # then the receiver saw one digest key: the killed send and the take-over, the same body each time
    keys = {r.idempotency_key for r in sink.received}
    assert len(keys) == 1 and next(iter(keys)).startswith("digest-"), keys
    assert 2 <= len(sink.received) <= 3
    assert len({json.dumps(r.body, sort_keys=True) for r in sink.received}) == 1
    # naming the period's people and no one else, under the heading of its kind
    text = sink.received[0].body["text"]
    lines = text.split("\n")
    assert heading in lines[0]
    assert [line.split(" (")[0] for line in lines[1:]] == named
    # and the cluster holds one digest, one delivery, delivered
    assert cluster.query(f"SELECT count(*) FROM {Digest._meta.db_table}")[0][0] == 1
    assert delivered() == 1
