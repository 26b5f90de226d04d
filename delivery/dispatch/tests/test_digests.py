"""Daily digests in the database: whom a digest names, once per (destination, date), weekends, erasure, resend."""

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from delivery.actions.resend import delivery_resend
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_url_fields
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.dispatch.digests import digests_build_due
from delivery.models import Delivery, DeliveryStatus, Destination, Digest, Weekend
from delivery.rules.digest_calendar import dates_named, digest_key, digest_schedule, next_digest
from delivery.tests.pipeline import make_due
from scheduling.models import Event
from users.services import user_erase
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")


def _next_weekday(weekday: int, *, at_least: int = 3) -> date:
    """A date at least `at_least` days ahead (Berlin) falling on `weekday` (0: Monday)."""
    day = timezone.now().astimezone(BERLIN).date() + timedelta(days=at_least)
    while day.weekday() != weekday:
        day += timedelta(days=1)
    return day


def _born_on(day: date, *, first: str, last: str = "Lovelace", **fields) -> object:
    return UserFactory(
        first_name=first,
        last_name=last,
        date_of_birth=date(1990, day.month, day.day),
        timezone="Europe/Berlin",
        **fields,
    )


def _digest_destination(*, day: date, weekend: str = Weekend.ON_THE_DAY, **fields) -> Destination:
    """A digest destination at 09:00 Berlin whose next digest is `day`'s (as if the days before had passed)."""
    destination = Destination.objects.create(
        name=fields.pop("name", "team"),
        **destination_url_fields(url=fields.pop("url", "https://hooks.example.com/team")),
        digest_time=time(9, 0),
        digest_timezone="Europe/Berlin",
        weekend=weekend,
        next_digest_at=timezone.now(),
        **fields,
    )
    digest_schedule(destination=destination, now=datetime.combine(day, time(8, 0), tzinfo=BERLIN))
    destination.save()
    return destination


def _at(day: date, hour: int = 9, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=BERLIN)


def test_a_digest_names_the_dates_people_in_its_audience_once(settings):
    # given a Wednesday with three birthdays: one in the audience, one outside it, one paused
    day = _next_weekday(2)
    _born_on(day, first="Ada", labels=["team:platform"])
    _born_on(day, first="Grace", last="Hopper", labels=["team:data"])
    paused = _born_on(day, first="Paused", labels=["team:platform"])
    paused.paused_at, paused.paused_by = timezone.now(), "ops"
    paused.save()
    destination = _digest_destination(day=day, audience_labels=["team:platform"])
    assert (destination.next_digest_date, destination.next_digest_at) == (day, _at(day))

    # when the scheduler looks just before, at, and again after the digest's time
    assert digests_build_due(now=_at(day, 8, 59)).queued == 0
    built = digests_build_due(now=_at(day, 9, 0))
    again = digests_build_due(now=_at(day, 9, 1))

    # then one digest, one delivery, under the digest's own key, naming only Ada, no age
    assert (built.queued, again.queued) == (1, 0)
    digest = Digest.objects.get()
    assert digest.idempotency_key == digest_key(destination_id=destination.pk, period=day.isoformat())
    assert digest.idempotency_key.startswith("digest-") and len(digest.idempotency_key) == 32
    assert [entry["line"] for entry in digest.entries] == ["Ada Lovelace's birthday"]
    delivery = Delivery.objects.get()
    assert delivery.event_id is None and delivery.digest_id == digest.pk
    assert delivery.idempotency_key == digest.idempotency_key
    assert (
        delivery.payload["occurrences"][0]["idempotency_key"]
        == Event.objects.get(user__first_name="Ada").idempotency_key
    )
    assert delivery.payload["heading"].startswith("Today, ")
    # and the next digest is the next day's
    destination.refresh_from_db()
    assert destination.next_digest_date == day + timedelta(days=1)


def test_the_database_refuses_a_second_digest_of_a_destination_and_date():
    # given a digest built for a date
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    destination = _digest_destination(day=day)
    digests_build_due(now=_at(day))

    # when another one is written for the same destination and date, then the database refuses it
    with pytest.raises(IntegrityError), transaction.atomic():
        Digest.objects.create(
            destination=destination, local_date=day, first_date=day, last_date=day, idempotency_key="x"
        )


def test_the_database_refuses_a_second_delivery_of_a_digest_by_an_index_of_digests_deliveries_only():
    # given a digest built and queued
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    _digest_destination(day=day)
    digests_build_due(now=_at(day))
    sent = Delivery.objects.get()

    # when a second delivery is written for the same digest, then the database refuses it
    copied = {
        f.attname: getattr(sent, f.attname) for f in Delivery._meta.concrete_fields if not f.primary_key
    }
    with pytest.raises(IntegrityError), transaction.atomic():
        Delivery.objects.create(**copied)
    # by the one index of the column, which holds the digests' deliveries only: a move of an
    # occurrence's delivery is never a HOT update, and would write an entry in a full one (migration 0021)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE tablename = 'delivery_delivery' AND indexdef LIKE '%%(digest_id)%%'"
        )
        [(name, definition)] = cursor.fetchall()
    assert name == "delivery_one_per_digest"
    assert definition.endswith("WHERE (digest_id IS NOT NULL)")


def test_nothing_is_sent_on_a_day_with_nobody():
    # given a digest destination and nobody born on its date
    day = _next_weekday(2)
    _born_on(day + timedelta(days=1), first="Tomorrow")
    destination = _digest_destination(day=day)

    # when its time comes
    built = digests_build_due(now=_at(day))

    # then nothing is queued, and the next date is next
    assert (built.queued, built.empty) == (0, 1)
    assert not Digest.objects.exists() and not Delivery.objects.exists()
    destination.refresh_from_db()
    assert destination.next_digest_date == day + timedelta(days=1)


def test_a_friday_before_destination_names_the_weekend_on_friday_and_sends_nothing_on_the_weekend():
    # given birthdays on a Friday, Saturday, Sunday and Monday, and a "Friday before" digest
    friday = _next_weekday(4)
    for offset, name in enumerate(["Fri", "Sat", "Sun", "Mon"]):
        _born_on(friday + timedelta(days=offset), first=name)
    destination = _digest_destination(day=friday, weekend=Weekend.FRIDAY_BEFORE)

    # when Friday's digest is built
    digests_build_due(now=_at(friday))

    # then it names Friday's, Saturday's and Sunday's people (the weekend's with their day), and the next is Monday
    digest = Digest.objects.get()
    assert [entry["line"] for entry in digest.entries] == [
        "Fri Lovelace's birthday",
        "Sat Lovelace's birthday (Saturday)",
        "Sun Lovelace's birthday (Sunday)",
    ]
    destination.refresh_from_db()
    assert destination.next_digest_date == friday + timedelta(days=3)
    digests_build_due(now=_at(friday + timedelta(days=3)))
    assert (
        Digest.objects.get(local_date=friday + timedelta(days=3)).entries[0]["line"]
        == "Mon Lovelace's birthday"
    )


def test_a_monday_after_destination_names_the_weekend_on_monday():
    monday = _next_weekday(0)
    assert dates_named(day=monday, weekend=Weekend.MONDAY_AFTER) == (monday - timedelta(days=2), monday)
    saturday = monday - timedelta(days=2)
    # From Friday's digest time on, the next one is Monday's: none on Saturday or Sunday.
    assert next_digest(
        at=time(9),
        timezone_name="Europe/Berlin",
        weekend=Weekend.MONDAY_AFTER,
        after=_at(saturday - timedelta(days=1)),
    ) == (monday, _at(monday))


def test_a_digest_destination_gets_no_delivery_per_occurrence():
    # given a digest destination beside one taking a message per greeting, and a due birthday
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    _digest_destination(day=day)
    Destination.objects.create(name="each", **destination_url_fields(url="https://hooks.example.com/each"))
    make_due()

    # when the scheduler claims it
    deliveries_enqueue_due(now=timezone.now())

    # then only the other destination has a delivery for it
    assert list(Delivery.objects.values_list("destination__name", flat=True)) == ["each"]


def test_an_occurrence_only_a_digest_wants_is_completed_saying_which_digest_names_it():
    # given only a digest destination, and a due birthday
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    _digest_destination(day=day)
    make_due()

    # when the scheduler claims it
    deliveries_enqueue_due(now=timezone.now())

    # then it has no delivery, and is COMPLETED with the reason naming the digest
    event = Event.objects.get(status=Event.Status.COMPLETED)
    assert not Delivery.objects.exists()
    assert event.failure_reason == "Nothing sent on its own: named in the daily digest of team."


def test_an_erased_recipient_is_taken_out_of_a_queued_digest_and_a_digest_of_only_them_goes_nowhere():
    # given a queued digest naming Ada and Grace, and another destination's naming only Grace
    day = _next_weekday(2)
    _born_on(day, first="Ada", labels=["team:a"])
    grace = _born_on(day, first="Grace", last="Hopper", labels=["team:b"])
    _digest_destination(day=day)
    _digest_destination(day=day, name="b", url="https://hooks.example.com/b", audience_labels=["team:b"])
    digests_build_due(now=_at(day))
    assert Delivery.objects.count() == 2

    # when Grace is erased before they go
    user_erase(user=grace)

    # then the first names only Ada, in its entries and its body, and the second is gone
    delivery = Delivery.objects.select_related("digest").get()
    assert "Grace" not in str(delivery.payload) and "Grace" not in str(delivery.digest.entries)
    assert [o["line"] for o in delivery.payload["occurrences"]] == ["Ada Lovelace's birthday"]
    assert Digest.objects.count() == 2  # the date stays taken: nothing is built again for it


def test_a_dead_digest_is_resent_under_the_same_key():
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    _digest_destination(day=day)
    digests_build_due(now=_at(day))
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DEAD, last_error="gone")

    resent = delivery_resend(delivery=delivery, operator="ops")

    assert resent.status == DeliveryStatus.QUEUED
    assert resent.idempotency_key == delivery.idempotency_key
    assert resent.payload == delivery.payload


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"digest_time": "25:00", "digest_timezone": "Europe/Berlin"}, "digest_time"),
        ({"digest_time": "09:00", "digest_timezone": "+02:00"}, "digest_timezone"),
        ({"digest_time": "09:00"}, "digest_timezone"),
        ({"weekend": "SOMETIMES"}, "weekend"),
        ({"weekend": Weekend.FRIDAY_BEFORE}, "weekend"),
        ({"weekend": Weekend.MONDAY_AFTER}, "weekend"),
    ],
)
def test_bad_digest_settings_are_refused_naming_the_field(changes, field):
    from delivery.destinations.services import destination_create

    with pytest.raises(ValidationError) as refused:
        destination_create(
            settings=DestinationSettings(name="x", url="https://hooks.example.com/x", **changes),
            operator="ops",
        )
    assert field in refused.value.message_dict
    assert not Destination.objects.exists()


def test_the_api_sets_a_digest_and_shows_the_next_one(api_client):
    # given a destination created through the API with a digest at 09:30 Berlin, Friday before
    answer = api_client.post(
        "/api/v1/destinations/",
        {
            "name": "team",
            "url": "https://hooks.example.com/team",
            "format": "slack",
            "digest_time": "09:30",
            "digest_timezone": "Europe/Berlin",
            "weekend": "FRIDAY_BEFORE",
        },
        format="json",
    )

    # then it answers with the digest settings and the next digest, a weekday at 09:30 Berlin
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert (body["digest_time"], body["digest_timezone"], body["weekend"]) == (
        "09:30",
        "Europe/Berlin",
        "FRIDAY_BEFORE",
    )
    next_date = date.fromisoformat(body["next_digest_date"])
    assert next_date.weekday() < 5
    due = datetime.fromisoformat(body["next_digest_at"].replace("Z", "+00:00")).astimezone(BERLIN)
    assert (due.date(), due.hour, due.minute) == (next_date, 9, 30)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"digest_time": "9.30", "digest_timezone": "Europe/Berlin"}, "digest_time"),
        ({"digest_time": "09:30", "digest_timezone": "Mars/Olympus"}, "digest_timezone"),
        ({"digest_time": "09:30"}, "digest_timezone"),
        ({"weekend": "MONDAY_AFTER"}, "weekend"),
    ],
)
def test_the_api_refuses_bad_digest_settings_with_a_400_naming_the_field(api_client, changes, field):
    answer = api_client.post(
        "/api/v1/destinations/",
        {"name": "team", "url": "https://hooks.example.com/team", **changes},
        format="json",
    )
    assert answer.status_code == 400
    assert field in answer.json()
    assert not Destination.objects.exists()


def test_a_recipients_export_holds_the_digest_lines_naming_them():
    from users.selectors import user_export

    day = _next_weekday(2)
    ada = _born_on(day, first="Ada")
    _born_on(day, first="Grace", last="Hopper")
    _digest_destination(day=day)
    digests_build_due(now=_at(day))

    exported = user_export(user_id=ada.pk)

    [digest] = exported["digests"]
    assert digest["local_date"] == day and digest["delivery_status"] == DeliveryStatus.QUEUED
    assert [entry["line"] for entry in digest["entries"]] == ["Ada Lovelace's birthday"]


def test_the_history_prune_deletes_sent_digests_past_the_retention_and_keeps_a_queued_one():
    from delivery.dispatch.retention import history_prune_batches

    # given two digests of a date long past: one delivered with an attempt, one still queued
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    _digest_destination(day=day)
    _digest_destination(day=day, name="b", url="https://hooks.example.com/b")
    digests_build_due(now=_at(day))
    sent, queued = Delivery.objects.order_by("destination__name").reverse()
    Delivery.objects.filter(pk=sent.pk).update(status=DeliveryStatus.DELIVERED)

    # when the history prune runs with a cutoff after their date
    list(history_prune_batches(cutoff=_at(day + timedelta(days=1))))

    # then the delivered one is gone with its digest; the queued one stays
    assert list(Delivery.objects.values_list("pk", flat=True)) == [queued.pk]
    assert Digest.objects.count() == 1


def test_a_recovery_queues_a_delivered_digest_again_under_its_key_in_the_destinations_current_format():
    from delivery.actions.recovery import recoveries_advance, recovery_create
    from delivery.destinations.services import destination_update

    # given a delivered Slack digest
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    destination = _digest_destination(day=day, format="slack")
    digests_build_due(now=_at(day))
    delivery = Delivery.objects.get()
    Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DELIVERED, updated_at=timezone.now())
    destination_update(destination=destination, operator="ops", changes={"format": "discord"})

    # when an operator recovers what the destination got in the last hour
    recovery_create(
        destination=destination,
        operator="ops",
        states=[DeliveryStatus.DELIVERED],
        since=timezone.now() - timedelta(hours=1),
        until=timezone.now() + timedelta(seconds=1),
    )
    while recoveries_advance(batch_size=10) is not None:
        pass

    # then the digest is queued again, same key, in the destination's format now
    again = Delivery.objects.get()
    assert again.status == DeliveryStatus.QUEUED and again.idempotency_key == delivery.idempotency_key
    assert "Ada Lovelace" in again.payload["content"]


def test_a_disabled_destinations_digest_is_skipped_and_its_calendar_goes_on():
    # given a disabled digest destination due on a date with a birthday
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    disabled = _digest_destination(day=day, enabled=False)

    # when its time comes
    built = digests_build_due(now=_at(day))

    # then nothing is sent, and its next digest is the next date's
    assert (built.skipped, built.queued) == (1, 0)
    assert not Digest.objects.exists() and not Delivery.objects.exists()
    disabled.refresh_from_db()
    assert disabled.next_digest_date == day + timedelta(days=1)


def test_a_digest_more_than_event_max_lateness_late_is_not_sent(settings):
    # given a digest destination whose date's digest the schedulers missed for longer than EVENT_MAX_LATENESS
    day = _next_weekday(2)
    _born_on(day, first="Ada")
    late = _digest_destination(day=day)

    # when a scheduler comes back
    built = digests_build_due(now=_at(day) + settings.EVENT_MAX_LATENESS + timedelta(minutes=1))

    # then that date's is skipped, and the calendar restarts within the window (a later date)
    assert (built.skipped, built.queued) == (1, 0)
    assert not Digest.objects.filter(local_date=day).exists()
    late.refresh_from_db()
    assert late.next_digest_date > day


def test_deleting_a_destination_keeps_its_sent_digests_history_without_it():
    from delivery.destinations.services import destination_delete

    day = _next_weekday(2)
    _born_on(day, first="Ada")
    destination = _digest_destination(day=day)
    digests_build_due(now=_at(day))
    Delivery.objects.update(status=DeliveryStatus.DELIVERED)

    destination_delete(destination=destination, operator="ops")

    digest = Digest.objects.get()
    assert digest.destination_id is None and Delivery.objects.get().destination_id is None
