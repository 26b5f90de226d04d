"""Wedding anniversaries: the handler's arithmetic, and the pending event following the recipient's data."""

from datetime import UTC, date, datetime
from types import SimpleNamespace

import pytest
from django.test import override_settings
from freezegun import freeze_time

from scheduling.handlers import get_handler
from scheduling.messages import render_message
from scheduling.models import Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for
from scheduling.services.sync import events_create_missing
from scheduling.services.transitions import Actor, events_transition
from users.models import User
from users.services import user_create, user_update, users_bulk_create_with_events

UTC = UTC
ANNIVERSARY, BIRTHDAY = EventType.ANNIVERSARY, EventType.BIRTHDAY
PENDING, PROCESSING = EventStatus.PENDING, EventStatus.PROCESSING


def next_anniversary(wedding: date | None, tz: str, now: datetime, after_date: date | None = None):
    user = SimpleNamespace(
        anniversary_date=wedding, date_of_birth=date(1960, 1, 1), timezone=tz, send_time=None
    )
    return get_handler(ANNIVERSARY).next_occurrence(user=user, now=now, after_date=after_date)


# --- the handler ------------------------------------------------------------------------


def test_a_recipient_without_a_wedding_date_has_no_anniversary():
    assert next_anniversary(None, "Europe/London", datetime(2027, 1, 1, tzinfo=UTC)) is None


def test_the_anniversary_is_sent_at_the_birthdays_local_time():
    result = next_anniversary(date(2015, 6, 20), "America/New_York", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.occurrence_date == date(2027, 6, 20)
    assert result.target_local.isoformat() == "2027-06-20T09:00:00-04:00"
    assert result.target_utc == datetime(2027, 6, 20, 13, 0, tzinfo=UTC)


def test_the_wedding_day_itself_is_not_an_anniversary():
    result = next_anniversary(date(2026, 11, 22), "Asia/Tokyo", datetime(2026, 11, 22, 0, 0, tzinfo=UTC))

    assert result.occurrence_date == date(2027, 11, 22)


@pytest.mark.parametrize(
    "now, expected",
    [
        (datetime(2026, 11, 22, tzinfo=UTC), date(2027, 2, 28)),  # common year: Feb 28
        (datetime(2027, 3, 1, tzinfo=UTC), date(2028, 2, 29)),  # leap year: Feb 29
        (datetime(2099, 3, 1, tzinfo=UTC), date(2100, 2, 28)),  # 2100 is not a leap year
    ],
)
def test_a_feb_29_wedding_is_remembered_on_feb_28_in_common_years(now, expected):
    assert next_anniversary(date(2004, 2, 29), "Europe/London", now).occurrence_date == expected


@override_settings(EVENT_SEND_TIME="02:30")
def test_an_anniversary_send_time_inside_a_dst_gap_moves_forward_by_the_gap():
    # 2027-03-14 02:00 EST -> 03:00 EDT: 02:30 does not exist, 03:30 EDT is sent.
    result = next_anniversary(date(2010, 3, 14), "America/New_York", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.target_local.isoformat() == "2027-03-14T03:30:00-04:00"


@override_settings(EVENT_SEND_TIME="01:30")
def test_an_anniversary_send_time_inside_a_dst_overlap_takes_the_first():
    result = next_anniversary(date(2010, 11, 7), "America/New_York", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.target_local.isoformat() == "2027-11-07T01:30:00-04:00"


def test_after_date_skips_the_anniversary_already_handled():
    now = datetime(2027, 6, 20, 5, 0, tzinfo=UTC)  # before 09:00 in London

    result = next_anniversary(date(2015, 6, 20), "Europe/London", now, after_date=date(2027, 6, 20))

    assert result.occurrence_date == date(2028, 6, 20)


@pytest.mark.parametrize(
    "wedding, occurrence, years",
    [(date(2015, 6, 20), date(2027, 6, 20), 12), (date(2004, 2, 29), date(2027, 2, 28), 23)],
)
def test_the_message_names_the_couple_and_counts_the_years_married(wedding, occurrence, years):
    handler = get_handler(ANNIVERSARY)
    user = SimpleNamespace(first_name="Ada", last_name="Lovelace", anniversary_date=wedding)

    values = handler.message_values(user=user, occurrence_date=occurrence)

    assert values == {"first_name": "Ada", "last_name": "Lovelace", "years": years}
    assert set(values) == handler.placeholders
    assert (
        render_message(
            template=handler.message_template, handler=handler, user=user, occurrence_date=occurrence
        )
        == "Hey, Ada Lovelace happy anniversary"
    )


# --- the pending event follows the recipient ------------------------------------------


def pending(user, event_type=ANNIVERSARY) -> Event | None:
    return Event.objects.filter(user=user, event_type=event_type, status=PENDING).first()


def key_for(user, occurrence_date: date) -> str:
    return idempotency_key_for(user_id=user.id, event_type=ANNIVERSARY, occurrence_date=occurrence_date)


def married_new_yorker(**fields) -> User:
    defaults = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": date(1990, 5, 5),
        "timezone": "America/New_York",
        "anniversary_date": date(2015, 6, 20),
    }
    return user_create(**{**defaults, **fields})


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_a_recipient_created_with_a_wedding_date_has_a_pending_anniversary_beside_the_birthday():
    user = married_new_yorker()

    anniversary = pending(user)
    assert (anniversary.occurrence_date, anniversary.target_timestamp_local) == (
        date(2027, 6, 20),
        "2027-06-20T09:00:00-04:00",
    )
    assert anniversary.idempotency_key == key_for(user, date(2027, 6, 20))
    assert pending(user, BIRTHDAY).occurrence_date == date(2027, 5, 5)
    assert Event.objects.filter(user=user).count() == 2


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_a_recipient_without_a_wedding_date_has_only_the_birthday():
    user = married_new_yorker(anniversary_date=None)

    assert list(Event.objects.filter(user=user).values_list("event_type", flat=True)) == [BIRTHDAY]


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_setting_a_wedding_date_schedules_the_anniversary_and_leaves_the_birthday():
    user = married_new_yorker(anniversary_date=None)
    birthday = Event.objects.values().get(user=user)

    user_update(user=user, data={"anniversary_date": date(2015, 6, 20)})

    assert pending(user).occurrence_date == date(2027, 6, 20)
    assert Event.objects.values().get(user=user, event_type=BIRTHDAY) == birthday


@pytest.mark.django_db
def test_clearing_the_wedding_date_removes_the_pending_anniversary_and_keeps_its_history():
    # given a recipient whose 2027 anniversary was sent and whose 2028 one is pending
    with freeze_time("2027-01-10T12:00:00Z"):
        user = married_new_yorker()
    sent = pending(user)
    events_transition(events=[sent], source=PENDING, target=PROCESSING, actor=Actor.SCHEDULER)
    events_transition(
        events=[sent],
        source=PROCESSING,
        target=EventStatus.COMPLETED,
        actor=Actor.WORKER,
        changes={"executed_at": datetime(2027, 6, 20, 13, tzinfo=UTC)},
    )
    with freeze_time("2027-07-01T12:00:00Z"):
        events_create_missing()
    assert pending(user).occurrence_date == date(2028, 6, 20)
    birthday = Event.objects.values().get(user=user, event_type=BIRTHDAY)

    # when the wedding date is cleared
    with freeze_time("2027-07-01T12:00:00Z"):
        user_update(user=user, data={"anniversary_date": None})

    # then no anniversary is pending; the sent one and the birthday are as they were
    assert pending(user) is None
    assert Event.objects.get(id=sent.id).status == EventStatus.COMPLETED
    assert Event.objects.values().get(user=user, event_type=BIRTHDAY) == birthday
    assert Event.objects.filter(user=user).count() == 2


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_changing_the_wedding_date_replaces_the_pending_anniversary():
    user = married_new_yorker()
    before = pending(user)

    user_update(user=user, data={"anniversary_date": date(2016, 9, 3)})

    after = pending(user)
    assert after.occurrence_date == date(2027, 9, 3)
    assert after.idempotency_key == key_for(user, date(2027, 9, 3)) != before.idempotency_key
    assert not Event.objects.filter(id=before.id).exists()
    assert Event.objects.filter(user=user, event_type=ANNIVERSARY).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "wedding, send_time, occurrence, expected_local",
    [
        (date(2004, 2, 29), "09:00", date(2027, 2, 28), "2027-02-28T09:00:00+09:00"),
        (date(2010, 3, 14), "02:30", date(2027, 3, 14), "2027-03-14T02:30:00+09:00"),
    ],
)
def test_a_zone_change_keeps_the_anniversarys_occurrence_and_key(
    wedding, send_time, occurrence, expected_local
):
    with override_settings(EVENT_SEND_TIME=send_time), freeze_time("2027-01-10T12:00:00Z"):
        user = married_new_yorker(anniversary_date=wedding)
        before = pending(user)
        assert before.occurrence_date == occurrence

        user_update(user=user, data={"timezone": "Asia/Tokyo"})

    after = pending(user)
    assert (after.id, after.occurrence_date, after.idempotency_key) == (
        before.id,
        occurrence,
        before.idempotency_key,
    )
    assert (after.target_timezone, after.target_timestamp_local) == ("Asia/Tokyo", expected_local)
    assert after.version == before.version + 1


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change, upcoming",
    [
        ({"anniversary_date": None}, None),
        ({"anniversary_date": date(2016, 9, 3)}, date(2027, 9, 3)),
        ({"timezone": "Asia/Tokyo"}, date(2028, 6, 20)),
    ],
)
def test_a_processing_anniversary_is_never_touched_and_the_next_follows_the_new_data(change, upcoming):
    # given an anniversary being sent
    with freeze_time("2027-01-10T12:00:00Z"):
        user = married_new_yorker()
    processing = pending(user)
    events_transition(events=[processing], source=PENDING, target=PROCESSING, actor=Actor.SCHEDULER)
    row = Event.objects.values().get(id=processing.id)

    # when the recipient is edited
    with freeze_time("2027-06-20T13:00:05Z"):
        user_update(user=user, data=change)

    # then the event being sent is exactly as it was, and the next one follows the new data
    assert Event.objects.values().get(id=processing.id) == row
    next_one = pending(user)
    assert (next_one.occurrence_date if next_one else None) == upcoming


@pytest.mark.django_db
def test_the_reconcile_looks_for_missing_anniversaries_among_recipients_with_a_wedding_date_only():
    # given recipients written without signals: unmarried ones first, a married one later
    with freeze_time("2027-01-01T12:00:00Z"):
        unmarried = User.objects.bulk_create(
            [
                User(first_name=f"U{i}", last_name="Single", date_of_birth=date(1990, 5, 5), timezone="UTC")
                for i in range(3)
            ]
        )
    with freeze_time("2027-01-05T12:00:00Z"):
        married = User.objects.bulk_create(
            [
                User(
                    first_name="M",
                    last_name="Married",
                    date_of_birth=date(1990, 5, 5),
                    timezone="UTC",
                    anniversary_date=date(2015, 6, 20),
                )
            ]
        )[0]

    # when the reconcile runs, a chunk of one per type at a time
    with freeze_time("2027-01-10T12:00:00Z"):
        first = events_create_missing(limit=1)
        anniversary = pending(married)
        later = [events_create_missing(limit=1) for _ in range(4)]

    # then the first chunk already found the married recipient's anniversary (the
    # unmarried, oldest first, never count as missing one), and every birthday follows
    assert first == 2
    assert anniversary.occurrence_date == date(2027, 6, 20)
    assert later == [1, 1, 1, 0]
    assert not Event.objects.filter(user__in=unmarried, event_type=ANNIVERSARY).exists()
    assert Event.objects.filter(event_type=BIRTHDAY, status=PENDING).count() == 4


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_the_bulk_import_schedules_anniversaries_exactly_as_creating_one_by_one():
    rows = [
        {
            "last_name": "Wed",
            "date_of_birth": date(1990, 5, 5),
            "timezone": "Asia/Kathmandu",
            "anniversary_date": date(2004, 2, 29),
        },
        {"last_name": "Single", "date_of_birth": date(1990, 5, 5), "timezone": "Asia/Kathmandu"},
    ]
    users_bulk_create_with_events(rows=[{**row, "first_name": "Imported"} for row in rows])
    for row in rows:
        user_create(**row, first_name="Created")

    schedule = (
        "event_type",
        "occurrence_date",
        "target_timestamp_utc",
        "target_timestamp_local",
        "target_timezone",
    )

    def events_of(first_name: str, last_name: str) -> list[tuple]:
        return list(
            Event.objects.filter(user__first_name=first_name, user__last_name=last_name)
            .order_by("event_type")
            .values_list(*schedule)
        )

    for last_name in ("Wed", "Single"):
        assert events_of("Imported", last_name) == events_of("Created", last_name)
    assert [event[0] for event in events_of("Imported", "Wed")] == [ANNIVERSARY, BIRTHDAY]
    assert events_of("Imported", "Wed")[0][1] == date(2027, 2, 28)
    assert [event[0] for event in events_of("Imported", "Single")] == [BIRTHDAY]
