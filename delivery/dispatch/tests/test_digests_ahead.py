"""Ahead of the day and weekly digests in the database: whom they name, once per period, in English and German;
their settings through the API (400 naming the field) and the next digest shown."""

from datetime import date, timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from delivery.destinations.services import destination_update
from delivery.dispatch.digests import digests_build_due
from delivery.dispatch.tests.test_digests import _at, _born_on, _digest_destination, _next_weekday
from delivery.models import Delivery, Destination, Digest
from delivery.rules.digest_calendar import digest_key, digest_period
from scheduling.celebration import YEARLESS_YEAR, Visibility
from users.models import CelebrationChoice

pytestmark = pytest.mark.django_db


def test_a_week_ahead_digest_names_the_people_of_the_date_a_week_on_without_an_age():
    # given a digest a week ahead, sent on a Tuesday: Ada born a week on, Grace on the day itself,
    # Yearless (no birth year) and Hidden (hides her age) a week on too
    tuesday = _next_weekday(1)
    ahead = tuesday + timedelta(days=7)
    _born_on(ahead, first="Ada")
    _born_on(tuesday, first="Grace", last="Hopper")
    yearless = _born_on(ahead, first="Yearless", last="Person")
    yearless.date_of_birth = date(YEARLESS_YEAR, ahead.month, ahead.day)
    yearless.save()
    _born_on(ahead, first="Hidden", last="Age", hide_age=True)
    destination = _digest_destination(day=tuesday, digest_days_ahead=7)

    # when Tuesday's digest time comes, and again
    assert digests_build_due(now=_at(tuesday)).queued == 1
    assert digests_build_due(now=_at(tuesday, 9, 1)).handled == 0

    # then one digest, its own key, naming the date a week on, and nobody's age or birth year
    digest = Digest.objects.get()
    assert (digest.local_date, digest.first_date, digest.last_date) == (tuesday, ahead, ahead)
    assert digest.period == f"{tuesday.isoformat()}+7"
    assert digest.idempotency_key == digest_key(destination_id=destination.pk, period=digest.period)
    assert [e["line"] for e in digest.entries] == [
        "Hidden Age's birthday",
        "Ada Lovelace's birthday",
        "Yearless Person's birthday",
    ]
    payload = Delivery.objects.get().payload
    assert payload["heading"] == f"In a week, Tuesday {ahead.day} {ahead:%B}:"
    assert "1990" not in str(payload) and "0004" not in str(payload)


def test_an_ahead_digest_names_only_the_publicly_celebrated_and_judges_a_pause_at_their_date():
    # given a week-ahead digest; Quiet celebrated privately, Paused paused now (a pause has no end
    # until resumed, so it holds on their day too), Back paused and resumed since, all a week on
    tuesday = _next_weekday(1)
    ahead = tuesday + timedelta(days=7)
    _born_on(ahead, first="Ada")
    quiet = _born_on(ahead, first="Quiet")
    CelebrationChoice.objects.create(user=quiet, event_type="BIRTHDAY", visibility=Visibility.PRIVATE)
    paused = _born_on(ahead, first="Paused")
    paused.paused_at, paused.paused_by = timezone.now(), "ops"
    paused.save()
    back = _born_on(ahead, first="Back")
    back.paused_at, back.resumed_at = timezone.now() - timedelta(days=2), timezone.now() - timedelta(days=1)
    back.paused_by = back.resumed_by = "ops"
    back.save()
    _digest_destination(day=tuesday, digest_days_ahead=7)

    digests_build_due(now=_at(tuesday))

    # then it names Ada and Back: not the private one, not one paused (the claim would hold them back)
    assert [e["line"] for e in Digest.objects.get().entries] == [
        "Ada Lovelace's birthday",
        "Back Lovelace's birthday",
    ]


def test_a_weekly_digest_names_the_coming_seven_days_once_a_week_in_german():
    # given a weekly digest on Mondays in German, people born on the Monday, the Sunday after, and
    # the Monday after that (the next week's)
    monday = _next_weekday(0)
    _born_on(monday, first="Ada")
    _born_on(monday + timedelta(days=6), first="Grace", last="Hopper")
    _born_on(monday + timedelta(days=7), first="Alan", last="Turing")
    destination = _digest_destination(day=monday, digest_weekday="MONDAY", digest_language="de")
    assert destination.next_digest_date == monday

    # when Monday's digest time comes
    assert digests_build_due(now=_at(monday)).queued == 1

    # then one digest for the week, naming its seven days in German, each line with its day
    digest = Digest.objects.get()
    assert (digest.first_date, digest.last_date) == (monday, monday + timedelta(days=6))
    assert digest.period == digest_period(day=monday, weekday="MONDAY")
    assert [e["line"] for e in digest.entries] == [
        "Geburtstag von Ada Lovelace (Montag)",
        "Geburtstag von Grace Hopper (Sonntag)",
    ]
    payload = Delivery.objects.get().payload
    assert payload["heading"].startswith("Die kommenden sieben Tage, Montag, ")
    assert payload["language"] == digest.language == "de"
    # and the next is next Monday's
    destination.refresh_from_db()
    assert destination.next_digest_date == monday + timedelta(days=7)


def test_a_weekly_digest_moved_to_a_later_day_of_a_week_already_sent_comes_next_week_as_shown():
    # given Monday's weekly digest built
    monday = _next_weekday(0)
    _born_on(monday + timedelta(days=3), first="Ada")
    destination = _digest_destination(day=monday, digest_weekday="MONDAY")
    assert digests_build_due(now=_at(monday)).queued == 1

    # when the operator moves it to Thursday that same Monday
    with freeze_time(_at(monday, 10)):
        moved = destination_update(
            destination=destination, operator="ops", changes={"digest_weekday": "THURSDAY"}
        )

    # then the next digest shown is next week's Thursday: this week had its digest
    next_thursday = monday + timedelta(days=10)
    assert (moved.next_digest_date, moved.next_digest_at) == (next_thursday, _at(next_thursday))
    # and the scheduler at this Thursday's time builds nothing
    assert digests_build_due(now=_at(monday + timedelta(days=3))).handled == 0
    assert Digest.objects.count() == 1


def test_the_database_refuses_a_second_digest_of_a_destination_and_period():
    from django.db import IntegrityError, transaction

    monday = _next_weekday(0)
    _born_on(monday, first="Ada")
    destination = _digest_destination(day=monday, digest_weekday="MONDAY")
    digests_build_due(now=_at(monday))
    period = Digest.objects.get().period

    # a second digest of the week, on another date and under another key: refused
    with pytest.raises(IntegrityError), transaction.atomic():
        Digest.objects.create(
            destination=destination,
            local_date=monday + timedelta(days=2),
            first_date=monday,
            last_date=monday,
            period=period,
            idempotency_key="another",
        )


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"digest_days_ahead": 31}, "digest_days_ahead"),
        ({"digest_days_ahead": -1}, "digest_days_ahead"),
        ({"digest_days_ahead": 7.5}, "digest_days_ahead"),
        ({"digest_days_ahead": True}, "digest_days_ahead"),
        ({"digest_weekday": "funday"}, "digest_weekday"),
        ({"digest_weekday": 1}, "digest_weekday"),
        ({"digest_language": "fr"}, "digest_language"),
        # a weekly digest names the weekend with the rest
        ({"digest_weekday": "MONDAY", "weekend": "FRIDAY_BEFORE"}, "weekend"),
        # only a digest names days ahead, or goes weekly
        ({"digest_time": None, "digest_days_ahead": 7}, "digest_days_ahead"),
        ({"digest_time": None, "digest_weekday": "MONDAY"}, "digest_weekday"),
    ],
)
def test_the_api_refuses_what_a_digest_cannot_be_naming_the_field_and_stores_nothing(
    api_client, changes, field
):
    destination = _digest_destination(day=_next_weekday(2))
    before = Destination.objects.values().get(pk=destination.pk)

    answer = api_client.patch(f"/api/v1/destinations/{destination.pk}/", changes, format="json")

    assert answer.status_code == 400, answer.content
    assert field in answer.json()
    assert Destination.objects.values().get(pk=destination.pk) == before


def test_the_api_sets_a_weekly_digest_a_week_ahead_and_answers_its_next_date(api_client):
    destination = _digest_destination(day=_next_weekday(2))

    answer = api_client.patch(
        f"/api/v1/destinations/{destination.pk}/",
        {"digest_weekday": "FRIDAY", "digest_days_ahead": 7, "digest_language": "de"},
        format="json",
    )

    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["digest_weekday"], body["digest_days_ahead"], body["digest_language"]) == ("FRIDAY", 7, "de")
    assert date.fromisoformat(body["next_digest_date"]).weekday() == 4
    # and back to a daily digest of the day with null
    body = api_client.patch(
        f"/api/v1/destinations/{destination.pk}/",
        {"digest_weekday": None, "digest_days_ahead": 0},
        format="json",
    ).json()
    assert (body["digest_weekday"], body["digest_days_ahead"]) == (None, 0)
