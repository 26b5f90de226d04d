"""The database's own guarantees, checked by writes that bypass Python validation."""

from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from delivery.dispatch.claim import deliveries_enqueue_due
from scheduling.models import Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for
from users.models import User
from users.tests.factories import UserFactory

UTC = UTC

pytestmark = pytest.mark.django_db


def event_row(
    user, *, occurrence_date=date(2020, 5, 5), status=EventStatus.COMPLETED, key=None, **extra
) -> Event:
    """An unsaved Event with every field filled, bypassing the services."""
    return Event(
        user=user,
        event_type=EventType.BIRTHDAY,
        status=status,
        occurrence_date=occurrence_date,
        target_timestamp_utc=datetime.combine(occurrence_date, datetime.min.time(), UTC) + timedelta(hours=9),
        target_timestamp_local=f"{occurrence_date.isoformat()}T09:00:00+00:00",
        target_timezone="UTC",
        idempotency_key=key
        or idempotency_key_for(
            user_id=user.id, event_type=EventType.BIRTHDAY, occurrence_date=occurrence_date
        ),
        **extra,
    )


@contextmanager
def raises_violation_of(constraint_name: str):
    """Expect an IntegrityError naming `constraint_name`, rolled back to a savepoint."""
    with pytest.raises(IntegrityError, match=constraint_name):
        with transaction.atomic():
            yield


@pytest.fixture
def user():
    return UserFactory(timezone="UTC", date_of_birth=date(1990, 5, 5))


# --- events --------------------------------------------------------------------------


def test_second_pending_event_for_the_same_user_and_type_is_refused(user):
    # given the user already has its PENDING birthday
    assert Event.objects.filter(user=user, status=EventStatus.PENDING).count() == 1

    # when another PENDING birthday for a different occurrence is inserted directly
    with raises_violation_of("event_one_pending_per_user_type"):
        Event.objects.create(
            **_fields(event_row(user, occurrence_date=date(2099, 5, 5), status=EventStatus.PENDING))
        )

    # then only the original remains
    assert Event.objects.filter(user=user, status=EventStatus.PENDING).count() == 1


def test_second_pending_event_via_bulk_create_is_refused(user):
    with raises_violation_of("event_one_pending_per_user_type"):
        Event.objects.bulk_create(
            [event_row(user, occurrence_date=date(2099, 5, 5), status=EventStatus.PENDING)]
        )

    assert Event.objects.filter(user=user).count() == 1


def test_turning_a_completed_event_back_to_pending_beside_another_pending_is_refused(user):
    # given a past COMPLETED event next to the PENDING one
    past = event_row(user, occurrence_date=date(2020, 5, 5))
    past.save(force_insert=True)

    # when a raw update makes it PENDING again
    with raises_violation_of("event_one_pending_per_user_type"):
        Event.objects.filter(id=past.id).update(status=EventStatus.PENDING)

    assert Event.objects.get(id=past.id).status == EventStatus.COMPLETED


def test_several_finished_events_for_one_user_are_allowed(user):
    # the partial unique constraint concerns PENDING rows only
    Event.objects.bulk_create(
        [
            event_row(user, occurrence_date=date(2020, 5, 5), status=EventStatus.COMPLETED),
            event_row(user, occurrence_date=date(2021, 5, 5), status=EventStatus.FAILED),
            event_row(user, occurrence_date=date(2022, 5, 5), status=EventStatus.COMPLETED),
        ]
    )

    assert Event.objects.filter(user=user).count() == 4


def test_pending_events_of_different_users_coexist(user):
    other = UserFactory()

    assert Event.objects.filter(status=EventStatus.PENDING, user__in=[user, other]).count() == 2


def test_duplicate_idempotency_key_is_refused(user):
    # given the user's PENDING event and its key
    existing = Event.objects.get(user=user)
    other = UserFactory()

    # when another user's finished event is inserted with the same key
    with raises_violation_of("idempotency_key"):
        Event.objects.create(
            **_fields(event_row(other, occurrence_date=date(2020, 1, 1), key=existing.idempotency_key))
        )

    assert Event.objects.filter(idempotency_key=existing.idempotency_key).count() == 1


def test_duplicate_user_type_and_occurrence_date_is_refused(user):
    # given the user's PENDING event for some occurrence date
    existing = Event.objects.get(user=user)

    # when a COMPLETED event for the same occurrence (with its own key) is inserted
    with raises_violation_of("event_one_per_user_type_occurrence"):
        Event.objects.bulk_create(
            [event_row(user, occurrence_date=existing.occurrence_date, key="event-0000000000000000")]
        )

    assert Event.objects.filter(user=user).count() == 1


def test_invalid_status_is_refused_on_insert(user):
    with raises_violation_of("event_status_valid"):
        Event.objects.bulk_create([event_row(user, status="DONE")])


def test_invalid_status_is_refused_on_raw_update(user):
    event = Event.objects.get(user=user)

    with raises_violation_of("event_status_valid"):
        Event.objects.filter(id=event.id).update(status="pending")

    assert Event.objects.get(id=event.id).status == EventStatus.PENDING


def test_invalid_event_type_is_refused(user):
    event = Event.objects.get(user=user)

    with raises_violation_of("event_type_valid"):
        Event.objects.filter(id=event.id).update(event_type="NAME_DAY")


def test_version_zero_is_refused(user):
    event = Event.objects.get(user=user)

    with raises_violation_of("event_version_positive"):
        Event.objects.filter(id=event.id).update(version=0)


# --- users ---------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["first_name", "last_name"])
@pytest.mark.parametrize("value", ["", " ", "   ", "\t", " \n\t "])
def test_blank_name_is_refused_by_a_raw_update(user, field, value):
    with raises_violation_of(f"user_{field}_not_blank"):
        User.objects.filter(id=user.id).update(**{field: value})

    assert getattr(User.objects.get(id=user.id), field).strip()


@pytest.mark.parametrize("value", ["A", "\tAda", "Mary Ann", "Zoë "])
def test_name_with_any_visible_character_is_allowed(user, value):
    User.objects.filter(id=user.id).update(first_name=value, last_name=value)

    assert User.objects.get(id=user.id).first_name == value


@pytest.mark.parametrize("field", ["first_name", "last_name"])
def test_blank_name_is_refused_by_bulk_create(field):
    values = {"first_name": "Ada", "last_name": "Lovelace", field: "   "}

    with raises_violation_of(f"user_{field}_not_blank"):
        User.objects.bulk_create([User(date_of_birth=date(1990, 1, 1), timezone="UTC", **values)])

    assert User.objects.count() == 0


def test_blank_name_is_refused_by_objects_create_without_clean():
    # Model.save() does not call clean(); the database must still refuse it
    with raises_violation_of("user_first_name_not_blank"):
        User.objects.create(
            first_name="  ", last_name="Lovelace", date_of_birth=date(1990, 1, 1), timezone="UTC"
        )

    assert User.objects.count() == 0


def test_blank_timezone_is_refused(user):
    with raises_violation_of("user_timezone_not_blank"):
        User.objects.filter(id=user.id).update(timezone="")


def test_date_of_birth_before_1900_is_refused_by_a_raw_update(user):
    with raises_violation_of("user_date_of_birth_from_1900"):
        User.objects.filter(id=user.id).update(date_of_birth=date(1899, 12, 31))

    assert User.objects.get(id=user.id).date_of_birth == date(1990, 5, 5)


def test_a_birthday_without_a_year_is_stored_in_year_4_and_no_other_year_before_1900_is(user):
    User.objects.filter(id=user.id).update(date_of_birth=date(4, 2, 29))

    with raises_violation_of("user_date_of_birth_from_1900_or_yearless"):
        User.objects.filter(id=user.id).update(date_of_birth=date(5, 6, 15))

    assert User.objects.get(id=user.id).date_of_birth == date(4, 2, 29)


def test_date_of_birth_before_1900_is_refused_by_bulk_create():
    with raises_violation_of("user_date_of_birth_from_1900"):
        User.objects.bulk_create(
            [User(first_name="A", last_name="B", date_of_birth=date(1850, 1, 1), timezone="UTC")]
        )


def test_date_of_birth_of_1900_01_01_is_allowed(user):
    User.objects.filter(id=user.id).update(date_of_birth=date(1900, 1, 1))

    assert User.objects.get(id=user.id).date_of_birth == date(1900, 1, 1)


def _fields(event: Event) -> dict:
    return {
        f.attname: getattr(event, f.attname)
        for f in Event._meta.concrete_fields
        if f.attname not in ("created_at", "updated_at")
    }


# --- the claim query's index -------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_claim_query_uses_the_partial_pending_index(production_plan):
    # given a few thousand events, nearly all finished, written the way a running
    # system writes them: each year's birthdays after the previous year's
    now = datetime(2027, 6, 1, tzinfo=UTC)
    users = User.objects.bulk_create(
        [
            User(
                first_name=f"U{i}",
                last_name="Load",
                date_of_birth=date(1980, 1, 1) + timedelta(days=i % 365),
                timezone="UTC",
            )
            for i in range(600)
        ]
    )
    events = []
    for year in range(2020, 2028):
        status = (
            EventStatus.PENDING
            if year == 2027
            else (EventStatus.FAILED if year == 2023 else EventStatus.COMPLETED)
        )
        for i, u in enumerate(users):
            events.append(
                event_row(u, occurrence_date=date(year, 1, 1) + timedelta(days=i % 365), status=status)
            )
    Event.objects.bulk_create(events, batch_size=2000)
    assert Event.objects.count() == 600 * 8
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_event")

    # when the planner is asked how it would run the scheduler's claim, as the
    # production code sends it
    sql, plan = production_plan(lambda: deliveries_enqueue_due(now=now, batch_size=100), "SKIP LOCKED")

    # then it reads the partial index of PENDING rows
    assert "event_pending_due_idx" in plan, plan
    # and the claim takes the 100 due PENDING rows with the earliest targets
    due = list(
        Event.objects.filter(status=EventStatus.PENDING, target_timestamp_utc__lte=now)
        .order_by("target_timestamp_utc")
        .values_list("id", flat=True)[:100]
    )
    assert deliveries_enqueue_due(now=now, batch_size=100).claimed == 100
    claimed = Event.objects.filter(id__in=due).exclude(status=EventStatus.PENDING).count()
    assert claimed == 100
