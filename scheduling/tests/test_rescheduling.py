"""Which occurrence a recipient's PENDING event is for after their data changes."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.test import override_settings
from freezegun import freeze_time

from scheduling.models import Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for
from scheduling.services.sync import events_create_missing
from scheduling.services.transitions import Actor, events_transition
from users.services import user_update
from users.tests.factories import UserFactory

UTC = UTC
PENDING, PROCESSING, COMPLETED, FAILED = (
    EventStatus.PENDING,
    EventStatus.PROCESSING,
    EventStatus.COMPLETED,
    EventStatus.FAILED,
)

pytestmark = pytest.mark.django_db


def only_pending_event(user) -> Event:
    return Event.objects.get(user=user, status=PENDING)


def key_for(user, occurrence_date: date) -> str:
    return idempotency_key_for(
        user_id=user.id, event_type=EventType.BIRTHDAY, occurrence_date=occurrence_date
    )


def handle(event: Event, status: str) -> None:
    """Walk a PENDING event to PROCESSING, and on to `status` if that is COMPLETED or FAILED."""
    events_transition(events=[event], source=PENDING, target=PROCESSING, actor=Actor.SCHEDULER)
    if status == COMPLETED:
        events_transition(
            events=[event],
            source=PROCESSING,
            target=COMPLETED,
            actor=Actor.WORKER,
            changes={"executed_at": datetime.now(UTC)},
        )
    elif status == FAILED:
        events_transition(
            events=[event],
            source=PROCESSING,
            target=FAILED,
            actor=Actor.WORKER,
            per_event={"failure_reason": ["too late"]},
        )


# --- a date of birth changed to today ------------------------------------------------


def new_yorker_on_their_birthday_morning():
    """Born 1990-11-22 in New York; at 05:00 UTC on 2026-11-22 the 14:00 UTC send is pending."""
    with freeze_time("2026-11-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 11, 22), timezone="America/New_York")
    event = only_pending_event(user)
    assert (event.occurrence_date, event.target_timestamp_utc) == (
        date(2026, 11, 22),
        datetime(2026, 11, 22, 14, 0, tzinfo=UTC),
    )
    return user, event


def test_date_of_birth_changed_to_today_replaces_todays_event_with_next_years():
    # given a pending event for today's 09:00 in New York
    user, before = new_yorker_on_their_birthday_morning()

    # when the date of birth is corrected to today: the day of birth is not a birthday
    with freeze_time("2026-11-22T05:00:00Z"):
        user_update(user=user, data={"date_of_birth": date(2026, 11, 22)})

    # then today's event is gone and the first birthday, a year on, is pending
    after = only_pending_event(user)
    assert after.occurrence_date == date(2027, 11, 22)
    assert after.target_timestamp_utc == datetime(2027, 11, 22, 14, 0, tzinfo=UTC)
    assert after.idempotency_key == key_for(user, date(2027, 11, 22))
    assert not Event.objects.filter(id=before.id).exists()
    assert Event.objects.filter(user=user).count() == 1


def test_date_of_birth_changed_to_today_through_the_api(api_client):
    user, before = new_yorker_on_their_birthday_morning()

    with freeze_time("2026-11-22T05:00:00Z"):
        response = api_client.patch(
            f"/api/v1/users/{user.id}/", {"date_of_birth": "2026-11-22"}, format="json"
        )

    assert response.status_code == 200, response.content
    assert response.json()["next_event"]["occurrence_date"] == "2027-11-22"
    assert only_pending_event(user).occurrence_date == date(2027, 11, 22)
    assert not Event.objects.filter(id=before.id).exists()


# --- a zone change that brings today's send time back ahead ---------------------------


def utc_recipient_created_after_todays_send():
    """Born on Nov 22 in UTC, created at 12:00 UTC on 2026-11-22: 09:00 UTC has passed.

    Without a catch-up window, so next year's birthday is pending (catching up is test_catch_up.py's).
    """
    with freeze_time("2026-11-22T12:00:00Z"), override_settings(EVENT_CATCH_UP_WINDOW=timedelta(0)):
        user = UserFactory(date_of_birth=date(1990, 11, 22), timezone="UTC")
    event = only_pending_event(user)
    assert event.occurrence_date == date(2027, 11, 22)
    return user, event


def test_zone_change_to_where_todays_send_is_still_ahead_schedules_today():
    # given next year's event, because today's 09:00 UTC had passed
    user, before = utc_recipient_created_after_todays_send()

    # when the recipient moves to Chicago, where 09:00 today is 15:00 UTC
    with freeze_time("2026-11-22T12:00:00Z"):
        user_update(user=user, data={"timezone": "America/Chicago"})

    # then today's birthday, never sent, is pending in Chicago, under today's key
    after = only_pending_event(user)
    assert after.occurrence_date == date(2026, 11, 22)
    assert after.target_timestamp_utc == datetime(2026, 11, 22, 15, 0, tzinfo=UTC)
    assert after.target_timestamp_local == "2026-11-22T09:00:00-06:00"
    assert after.target_timezone == "America/Chicago"
    assert after.idempotency_key == key_for(user, date(2026, 11, 22))
    assert not Event.objects.filter(id=before.id).exists()
    assert Event.objects.filter(user=user).count() == 1


def test_zone_change_to_where_todays_send_is_still_ahead_through_the_api(api_client):
    user, _ = utc_recipient_created_after_todays_send()

    with freeze_time("2026-11-22T12:00:00Z"):
        response = api_client.patch(
            f"/api/v1/users/{user.id}/", {"timezone": "America/Chicago"}, format="json"
        )

    assert response.status_code == 200, response.content
    next_event = response.json()["next_event"]
    assert next_event["occurrence_date"] == "2026-11-22"
    assert next_event["target_timestamp_utc"] == "2026-11-22T15:00:00Z"


@pytest.mark.parametrize("handled", [PROCESSING, COMPLETED, FAILED])
def test_zone_change_never_brings_back_an_occurrence_already_handled(handled):
    # given a UTC recipient whose 2026-11-22 birthday was claimed at 09:00 UTC
    with freeze_time("2026-11-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 11, 22), timezone="UTC")
    todays = only_pending_event(user)
    with freeze_time("2026-11-22T09:00:00Z"):
        handle(todays, handled)
        events_create_missing()
    before = only_pending_event(user)
    assert before.occurrence_date == date(2027, 11, 22)
    todays_row = Event.objects.values().get(id=todays.id)

    # when at 12:00 UTC they move to Chicago, where 09:00 today is still ahead
    with freeze_time("2026-11-22T12:00:00Z"):
        user_update(user=user, data={"timezone": "America/Chicago"})

    # then next year's occurrence and key stay, only its instant moves
    after = only_pending_event(user)
    assert (after.id, after.occurrence_date, after.idempotency_key) == (
        before.id,
        date(2027, 11, 22),
        before.idempotency_key,
    )
    assert after.target_timestamp_utc == datetime(2027, 11, 22, 15, 0, tzinfo=UTC)
    # and today's handled event is exactly as it was
    assert Event.objects.values().get(id=todays.id) == todays_row
    assert Event.objects.filter(user=user).count() == 2


# --- rules a zone change must keep ------------------------------------------------------


@pytest.mark.parametrize(
    "date_of_birth, send_time, now, occurrence, new_zone, expected_local",
    [
        # Feb 29 celebrated on Feb 28 of a common year
        (
            date(1996, 2, 29),
            "09:00",
            "2027-01-10T12:00:00Z",
            date(2027, 2, 28),
            "Asia/Tokyo",
            "2027-02-28T09:00:00+09:00",
        ),
        # 02:30 does not exist in New York on 2027-03-14: 03:30 EDT
        (
            date(1990, 3, 14),
            "02:30",
            "2027-01-10T12:00:00Z",
            date(2027, 3, 14),
            "America/New_York",
            "2027-03-14T03:30:00-04:00",
        ),
        # 01:30 happens twice in New York on 2027-11-07: the first (EDT)
        (
            date(1990, 11, 7),
            "01:30",
            "2027-01-10T12:00:00Z",
            date(2027, 11, 7),
            "America/New_York",
            "2027-11-07T01:30:00-04:00",
        ),
    ],
)
def test_zone_change_keeps_the_occurrence_and_key_on_feb_29_and_across_dst(
    date_of_birth, send_time, now, occurrence, new_zone, expected_local
):
    with override_settings(EVENT_SEND_TIME=send_time), freeze_time(now):
        user = UserFactory(date_of_birth=date_of_birth, timezone="Europe/London")
        before = only_pending_event(user)
        assert before.occurrence_date == occurrence

        user_update(user=user, data={"timezone": new_zone})

    after = only_pending_event(user)
    assert (after.id, after.occurrence_date, after.idempotency_key) == (
        before.id,
        occurrence,
        before.idempotency_key,
    )
    assert after.target_timestamp_local == expected_local
    assert after.target_timezone == new_zone


def test_zone_change_after_todays_send_keeps_todays_event_due_rather_than_skipping_it():
    # given a New York recipient whose 09:00 (13:00 UTC) is still ahead at 10:00 UTC
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    before = only_pending_event(user)

    # when they move to London, where 09:00 (08:00 UTC) has passed
    with freeze_time("2027-05-05T10:00:00Z"):
        user_update(user=user, data={"timezone": "Europe/London"})

    # then today's occurrence stays, due at once, not moved to next year
    after = only_pending_event(user)
    assert (after.id, after.occurrence_date, after.idempotency_key) == (
        before.id,
        date(2027, 5, 5),
        before.idempotency_key,
    )
    assert after.target_timestamp_utc == datetime(2027, 5, 5, 8, 0, tzinfo=UTC)


def test_date_of_birth_change_after_an_overdue_event_does_not_schedule_a_passed_birthday():
    # given an event for 2027-05-05 that the scheduler has not claimed by 2027-05-20
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="Europe/London")

    # when the date of birth becomes May 10, which has also passed
    with freeze_time("2027-05-20T00:00:00Z"):
        user_update(user=user, data={"date_of_birth": date(1990, 5, 10)})

    # then the next birthday is next year's, not a late one for this year
    assert only_pending_event(user).occurrence_date == date(2028, 5, 10)
    assert Event.objects.filter(user=user).count() == 1
