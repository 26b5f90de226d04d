"""Daily digests for real: run_scheduler and run_worker processes, a local Slack-like receiver, counted there.

The test's clock: the processes run now, so a date's digest time is brought to
now (its `next_digest_at`), as if that morning had come; everything else (the
scheduler's look for due digests, the build, the outbox, the worker, the kill)
is the product's own.

- A worker SIGKILLed while the digest's request is at the receiver: another
  worker takes the lease back and sends it again under the same key; the
  receiver sees one digest for the date (one key), sent twice at most, always
  the same body, naming the right people.
- The next date's digest, after a recipient born that day was erased: they are
  not named.
- A PostgreSQL restart (a private cluster: the shared one is never restarted)
  while the digest is being sent: still one digest for the date.
- A "Friday before" destination: Friday's one message names Friday to Sunday.
- Two schedulers, 30 digest destinations due at once: each built and sent once.
- A failover (primary crashed, synchronous standby promoted 3 s later, one
  multi-host DATABASE_URL) while 30 digests fall due: each arrives, none is
  accepted twice, the new primary holds one Digest each.
- 5,000 recipients on one date at a Slack destination: one message within
  Slack's 4,000 characters, whole lines, "… and N more".
"""

import json
import signal
import time as clock
from datetime import date, time, timedelta

import pytest
from django.utils import timezone

from delivery.destinations.services import destination_url_fields
from delivery.models import Delivery, DeliveryStatus, Destination, Digest
from delivery.rules.digest_calendar import digest_key
from delivery.states.endpoints import endpoint_for_destination
from delivery.tests.pipeline import ScriptedSink, eventually, process_env, start_process, stop_all, wait_until
from delivery.tests.test_failover import replicated_pair  # noqa: F401, F811 - the fixture
from delivery.tests.test_outage import manage, private_postgres  # noqa: F401, F811 - the fixture
from devtools.sink import Reply
from users.services import user_erase
from users.tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _destination(*, url: str, **fields) -> Destination:
    """A destination saved as the product saves one: its URL kept by its key, its endpoint made."""
    destination = Destination.objects.create(**destination_url_fields(url=url), **fields)
    endpoint_for_destination(destination=destination)
    return destination


def _ahead(days: int) -> date:
    return timezone.now().date() + timedelta(days=days)


def _born(day: date, first: str, last: str, **fields):
    return UserFactory(
        first_name=first,
        last_name=last,
        date_of_birth=date(1985, day.month, day.day),
        timezone="Europe/Berlin",
        **fields,
    )


def _bring_digest_due(destination: Destination, day: date) -> None:
    """The test's clock: `day`'s digest time is now."""
    Destination.objects.filter(pk=destination.pk).update(next_digest_date=day, next_digest_at=timezone.now())


def _texts(sink: ScriptedSink, key: str) -> list[str]:
    return [r.body["text"] for r in sink.received if r.idempotency_key == key]


def test_a_digest_goes_once_per_date_through_a_worker_killed_mid_send_and_leaves_out_the_erased(
    delivery_settings, tmp_path
):
    # given a Slack digest destination for the platform team, two of its people born on one date,
    # one of another team, and two of its people born the next date
    delivery_settings.WEBHOOK_URL = ""
    first_day, second_day = _ahead(5), _ahead(6)
    _born(first_day, "Ada", "Lovelace", labels=["team:platform"])
    _born(first_day, "Grace", "Hopper", labels=["team:platform"])
    _born(first_day, "Other", "Team", labels=["team:data"])
    _born(second_day, "Alan", "Turing", labels=["team:platform"])
    erased = _born(second_day, "Erased", "Person", labels=["team:platform"])
    with ScriptedSink() as sink:
        destination = _destination(
            name="platform",
            url=sink.url,
            format="slack",
            audience_labels=["team:platform"],
            digest_time=time(9, 0),
            digest_timezone="Europe/Berlin",
            next_digest_date=first_day,
            next_digest_at=timezone.now() + timedelta(days=1),
            max_rate=50,
        )
        # The first request holds long enough to be killed mid-send; the second is answered.
        key = digest_key(destination_id=destination.pk, period=first_day.isoformat())
        sink.script(key, Reply(status=200, delay=20), Reply(status=200))
        env = process_env(delivery_settings)
        scheduler = start_process(["run_scheduler"], env, tmp_path / "scheduler.log")
        doomed = start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "doomed.log")
        processes = [scheduler]
        try:
            # when the first date's digest time comes and the worker is killed while sending it
            _bring_digest_due(destination, first_day)
            wait_until(lambda: len(sink.received) == 1, 30, "the digest to reach the receiver")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=10)
            processes.append(
                start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "rescuer.log")
            )
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 1,
                60,
                "the digest to be taken over and delivered",
            )

            # and a recipient of the second date is erased before its digest
            user_erase(user=erased)
            _bring_digest_due(destination, second_day)
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 2,
                60,
                "the second date's digest to be delivered",
            )
            clock.sleep(2)  # a resend already on its way would arrive now
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    # then the receiver got one digest per date: the first date's key twice (the killed send and
    # the take-over), the same body both times; the second's once
    second_key = digest_key(destination_id=destination.pk, period=second_day.isoformat())
    assert [r.idempotency_key for r in sink.received] == [key, key, second_key]
    first_texts = _texts(sink, key)
    assert first_texts[0] == first_texts[1]
    # naming the platform team's people of that date, with no age, and nobody else
    assert "Ada Lovelace's birthday" in first_texts[0] and "Grace Hopper's birthday" in first_texts[0]
    assert "Other" not in first_texts[0] and "1985" not in first_texts[0] and " age" not in first_texts[0]
    # and the second names Alan, never the erased recipient
    (second_text,) = _texts(sink, second_key)
    assert "Alan Turing's birthday" in second_text and "Erased" not in second_text
    assert all("Erased" not in json.dumps(r.body) for r in sink.received)
    assert Digest.objects.count() == 2


# Runs inside `manage.py shell` against the private cluster: a standard digest destination at
# the receiver, three recipients born on the date it names, its digest time brought to now.
CREATE_DIGEST = """
from datetime import date, time, timedelta
from django.utils import timezone
from delivery.models import Destination
from delivery.destinations.services import destination_url_fields
from delivery.states.endpoints import endpoint_for_destination
from users.models import User

day = timezone.now().date() + timedelta(days=5)
for first in ("Ada", "Grace", "Alan"):
    User.objects.create(
        first_name=first, last_name="Restart", date_of_birth=date(1985, day.month, day.day),
        timezone="Europe/Berlin",
    )
destination = Destination.objects.create(
    name="digest", **destination_url_fields(url={url!r}), digest_time=time(9, 0), digest_timezone="Europe/Berlin",
    next_digest_date=day, next_digest_at=timezone.now() + timedelta(seconds=2),
)
endpoint_for_destination(destination=destination)
"""


def test_a_digest_goes_once_through_a_postgresql_restart(private_postgres, delivery_settings, tmp_path):  # noqa: F811
    # given a digest destination whose digest is due in two seconds, on a private cluster
    cluster = private_postgres
    delivery_settings.WEBHOOK_URL = ""
    with ScriptedSink() as sink:
        # Slow answers: the restart comes while the request is at the receiver.
        sink.default = Reply(status=200, delay=1.0)
        manage(
            ["shell", "-c", CREATE_DIGEST.format(url=sink.url)],
            cluster.database_url,
            env=process_env(delivery_settings),
        )
        env = process_env(delivery_settings, DATABASE_URL=cluster.database_url)
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
            start_process(["run_worker", "--concurrency", "1"], env, tmp_path / "worker.log"),
        ]
        try:
            # when PostgreSQL restarts while the digest is being sent
            wait_until(lambda: len(sink.received) >= 1, 30, "the digest to reach the receiver")
            cluster.stop()
            cluster.start()

            def delivered() -> bool:
                try:
                    return (
                        cluster.query(
                            f"SELECT count(*) FROM {Delivery._meta.db_table} WHERE status = 'DELIVERED'"
                        )[0][0]
                        == 1
                    )
                except Exception:  # noqa: BLE001 - the cluster is coming back
                    return False

            wait_until(delivered, 60, "the digest to be recorded delivered")
            clock.sleep(3)  # a second build or a resend on its way would arrive now
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    # then one digest for the date: one key at the receiver, the same body every time it came
    assert len({r.idempotency_key for r in sink.received}) == 1
    assert all(r.idempotency_key.startswith("digest-") for r in sink.received)
    assert len({json.dumps(r.body, sort_keys=True) for r in sink.received}) == 1
    names = [o["line"] for o in sink.received[0].body["occurrences"]]
    assert names == ["Ada Restart's birthday", "Alan Restart's birthday", "Grace Restart's birthday"]
    assert cluster.query(f"SELECT count(*) FROM {Digest._meta.db_table}")[0][0] == 1


def test_a_friday_before_destination_names_the_weekend_in_fridays_digest(delivery_settings, tmp_path):
    # given a "Friday before" digest destination and people born next Friday, Saturday, Sunday and Monday
    delivery_settings.WEBHOOK_URL = ""
    friday = _ahead(3)
    while friday.weekday() != 4:
        friday += timedelta(days=1)
    for offset, first in enumerate(("Fri", "Sat", "Sun", "Mon")):
        _born(friday + timedelta(days=offset), first, "Day")
    with ScriptedSink() as sink:
        destination = _destination(
            name="weekend",
            url=sink.url,
            format="discord",
            digest_time=time(9, 0),
            digest_timezone="Europe/Berlin",
            weekend="FRIDAY_BEFORE",
            next_digest_date=friday,
            next_digest_at=timezone.now() + timedelta(days=1),
            max_rate=50,
        )
        env = process_env(delivery_settings)
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
            start_process(["run_worker"], env, tmp_path / "worker.log"),
        ]
        try:
            # when Friday's digest time comes
            _bring_digest_due(destination, friday)
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 1,
                60,
                "Friday's digest to be delivered",
            )
            clock.sleep(2)
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    # then one message names Friday's, Saturday's and Sunday's people, not Monday's
    [received] = sink.received
    # As shown: Discord's escapes of its markdown characters ("\(", "\:") taken off.
    content = received.body["content"].replace("\\", "")
    assert "Fri Day's birthday" in content and "Sat Day's birthday (Saturday)" in content
    assert "Sun Day's birthday (Sunday)" in content and "Mon Day" not in content
    # and the next digest is Monday's: none on the weekend
    destination.refresh_from_db()
    assert destination.next_digest_date == friday + timedelta(days=3)


def test_two_schedulers_build_each_destinations_digest_once(delivery_settings, tmp_path):
    # given 30 digest destinations at one receiver, all due at once, and two people born on their date
    delivery_settings.WEBHOOK_URL = ""
    day = _ahead(5)
    _born(day, "Ada", "Lovelace")
    _born(day, "Grace", "Hopper")
    with ScriptedSink() as sink:
        destinations = [
            _destination(
                name=f"team{i}",
                url=f"{sink.url}/team{i}",
                digest_time=time(9, 0),
                digest_timezone="Europe/Berlin",
                next_digest_date=day,
                next_digest_at=timezone.now() + timedelta(days=1),
                max_rate=100,
            )
            for i in range(30)
        ]
        env = process_env(delivery_settings)
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler1.log"),
            start_process(["run_scheduler"], env, tmp_path / "scheduler2.log"),
            start_process(["run_worker"], env, tmp_path / "worker.log"),
        ]
        try:
            # when every digest comes due at the same moment under both schedulers
            Destination.objects.update(next_digest_at=timezone.now())
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == len(destinations),
                60,
                "every destination's digest to be delivered",
            )
            clock.sleep(3)  # a second build would be queued and sent by now
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0, 0]
    # then each destination's digest arrived once, under its own key, and each was built once
    expected = {digest_key(destination_id=d.pk, period=day.isoformat()) for d in destinations}
    assert sorted(r.idempotency_key for r in sink.received) == sorted(expected)
    assert Digest.objects.count() == len(destinations)


# Runs inside `manage.py shell` on the primary: 30 standard digest destinations at the receiver, each
# naming one of the 30 dates most of the fixture's recipients have an occurrence on, none due yet.
CREATE_DIGEST_DESTINATIONS = """
from datetime import time, timedelta
from django.db.models import Count
from django.utils import timezone
from delivery.models import Destination
from delivery.destinations.services import destination_url_fields
from delivery.states.endpoints import endpoint_for_destination
from scheduling.models import Event

dates = [
    row[0]
    for row in Event.objects.values_list("occurrence_date").annotate(n=Count("id")).order_by("-n", "occurrence_date")[:30]
]
for i, day in enumerate(dates):
    destination = Destination.objects.create(
        name=f"digest{{i}}", **destination_url_fields(url=f"{url}/digest{{i}}"), digest_time=time(9, 0),
        digest_timezone="Europe/Berlin", next_digest_date=day, next_digest_at=timezone.now() + timedelta(days=1),
        max_rate=100,
    )
    endpoint_for_destination(destination=destination)
"""


def test_digests_go_once_each_through_a_failover(replicated_pair, delivery_settings, sink, tmp_path):  # noqa: F811
    import random
    from collections import Counter

    from delivery.tests.test_failover import DATABASE_NAME, PROMOTION_DELAY, count, query

    # given 30 digest destinations on a primary with a synchronous standby, one multi-host DATABASE_URL,
    # their digests falling due one every 200 ms, a receiver answering in 100-300 ms
    pair = replicated_pair
    delivery_settings.WEBHOOK_URL = ""
    pair.replicate_synchronously()
    only_primary = f"postgres://postgres@127.0.0.1:{pair.primary.port}/{DATABASE_NAME}"
    manage(
        ["shell", "-c", CREATE_DIGEST_DESTINATIONS.format(url=sink.url)],
        only_primary,
        env=process_env(delivery_settings),
    )
    latency = random.Random(35)
    sink.respond = lambda received: Reply(status=200, delay=latency.uniform(0.1, 0.3))
    env = process_env(delivery_settings, DATABASE_URL=pair.url)
    logs = [tmp_path / name for name in ("scheduler.log", "worker-1.log", "worker-2.log")]
    processes = [start_process(["run_scheduler"], env, logs[0])]
    processes += [start_process(["run_worker", "--concurrency", "4"], env, log) for log in logs[1:]]
    table = Destination._meta.db_table
    query(
        pair.primary,
        f"WITH n AS (SELECT id, row_number() OVER (ORDER BY id) AS k FROM {table}) "
        f"UPDATE {table} d SET next_digest_at = now() + n.k * interval '200 milliseconds' FROM n WHERE d.id = n.id",
    )
    try:
        # when the primary crashes once a quarter have arrived, and the standby is promoted 3 s later
        wait_until(lambda: len(set(sink.keys())) >= 8, 60, "a quarter of the digests to arrive")
        pair.primary.crash()
        clock.sleep(PROMOTION_DELAY)
        pair.standby.promote()
        new_primary = pair.standby
        settled = sink.wait_for(30, timeout=120) and eventually(
            lambda: count(
                new_primary,
                f"SELECT count(*) FROM {Delivery._meta.db_table} WHERE digest_id IS NOT NULL AND status = 'DELIVERED'",
            )
            == 30,
            timeout=90,
        )
        clock.sleep(2)  # a resend or a second build would arrive now
        running = [process.poll() is None for process in processes]
    finally:
        exit_codes = stop_all(processes)

    # then no process exited, every digest arrived, none accepted twice (synchronous: no commit lost),
    # and the new primary holds one Digest per destination, each delivered
    assert running == [True, True, True] and exit_codes == [0, 0, 0]
    assert settled
    keys = Counter(sink.keys())
    assert len(keys) == 30 and all(key.startswith("digest-") for key in keys)
    accepted = Counter(r.idempotency_key for r in sink.received if r.status == 200)
    assert max(accepted.values()) == 1, accepted.most_common(3)
    assert count(new_primary, f"SELECT count(*) FROM {Digest._meta.db_table}") == 30


def test_a_digest_of_5000_names_reaches_slack_within_its_limit_saying_how_many_more(
    delivery_settings, tmp_path
):
    from users.services import users_bulk_create_with_events

    # given 5,000 recipients born on one date and a Slack digest destination
    delivery_settings.WEBHOOK_URL = ""
    day = _ahead(5)
    users_bulk_create_with_events(
        rows=[
            {
                "first_name": f"Person{i}",
                "last_name": "Many",
                "date_of_birth": date(1980 + i % 30, day.month, day.day),
                "timezone": "Europe/Berlin",
            }
            for i in range(5000)
        ]
    )
    with ScriptedSink() as sink:
        destination = _destination(
            name="everyone",
            url=sink.url,
            format="slack",
            digest_time=time(9, 0),
            digest_timezone="Europe/Berlin",
            next_digest_date=day,
            next_digest_at=timezone.now(),
            max_rate=50,
        )
        env = process_env(delivery_settings)
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
            start_process(["run_worker"], env, tmp_path / "worker.log"),
        ]
        try:
            # when its digest is built and sent
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 1,
                60,
                "the digest to be delivered",
            )
        finally:
            exit_codes = stop_all(processes)

    # then one message within Slack's 4,000 characters, whole lines, the rest counted
    assert exit_codes == [0, 0]
    [received] = sink.received
    text = received.body["text"]
    assert len(text) <= 4000
    lines = text.split("\n")
    named = [line for line in lines if line.endswith("'s birthday")]
    assert len(named) == len(lines) - 2  # the heading, the names, the count of the rest
    assert lines[-1] == f"… and {5000 - len(named):,} more"
    # while the digest itself names all 5,000 (and the standard body would list them)
    assert len(Digest.objects.get(destination=destination).entries) == 5000
