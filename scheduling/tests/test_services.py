"""The event services: state machine, optimistic locking, keys, and user-save scheduling."""

import logging
import re
import uuid
from datetime import UTC, date, datetime
from unittest import mock

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

from config.logging import TextFormatter
from runtime.sql import pipeline
from scheduling import signals
from scheduling.exceptions import InvalidStateTransition, OptimisticLockError
from scheduling.handlers import local_send_instant
from scheduling.models import Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for
from scheduling.services.sync import event_deliver_now, event_reschedule, events_create_missing
from scheduling.services.transitions import (
    EVENT_TRANSITIONS,
    Actor,
    EventRef,
    events_transition,
    start_events_transition,
)
from users.models import User
from users.services import user_create, user_update
from users.tests.factories import UserFactory

UTC = UTC
PENDING, PROCESSING, COMPLETED, FAILED = (
    EventStatus.PENDING,
    EventStatus.PROCESSING,
    EventStatus.COMPLETED,
    EventStatus.FAILED,
)


# The automatic paths, as production makes them: the scheduler's claim moves
# PENDING events, the worker's record moves PROCESSING ones (both call
# events_transition, which is what these tests drive).
def start_processing(event: Event) -> Event:
    events_transition(events=[event], source=event.status, target=PROCESSING, actor=Actor.SCHEDULER)
    return event


def complete(event: Event) -> Event:
    events_transition(
        events=[event],
        source=event.status,
        target=COMPLETED,
        actor=Actor.WORKER,
        changes={"executed_at": datetime.now(UTC)},
    )
    return event


def fail(event: Event, *, reason: str) -> Event:
    events_transition(
        events=[event],
        source=event.status,
        target=FAILED,
        actor=Actor.WORKER,
        per_event={"failure_reason": [reason]},
    )
    return event


def do_transition(event: Event, target: str) -> Event:
    if target == PROCESSING:
        return start_processing(event)
    if target == COMPLETED:
        return complete(event)
    if target == FAILED:
        return fail(event, reason="too late")
    raise AssertionError(f"no service moves an event to {target}")


def event_in(status: str) -> Event:
    """A user's event walked through the state machine to `status`."""
    event = Event.objects.get(user=UserFactory(), status=PENDING)
    if status in (PROCESSING, COMPLETED, FAILED):
        event = start_processing(event)
    if status in (COMPLETED, FAILED):
        event = do_transition(event, status)
    return Event.objects.get(id=event.id)


def db_row(event: Event) -> dict:
    return Event.objects.values().get(id=event.id)


@pytest.fixture
def scheduling_logs(caplog):
    """caplog for the `scheduling` loggers, which do not propagate to the root logger."""
    logger = logging.getLogger("scheduling")
    logger.addHandler(caplog.handler)
    caplog.handler.setLevel(logging.DEBUG)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


# --- the state machine ---------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "source, target", [(PENDING, PROCESSING), (PROCESSING, COMPLETED), (PROCESSING, FAILED)]
)
def test_valid_transition_bumps_the_version_by_one_and_persists(source, target):
    # given an event in the source state
    event = event_in(source)
    version = event.version

    # when it is moved to the target state
    returned = do_transition(event, target)

    # then the returned object and the stored row both show the new state and version
    assert (returned.status, returned.version) == (target, version + 1)
    stored = Event.objects.get(id=event.id)
    assert (stored.status, stored.version) == (target, version + 1)


def test_every_move_belongs_to_exactly_one_actor_and_only_the_operator_reopens_an_ended_event():
    assert set(EVENT_TRANSITIONS.values()) == {Actor.SCHEDULER, Actor.WORKER, Actor.OPERATOR}
    # A resend (FAILED) and a destination's recovery (FAILED or COMPLETED).
    assert [move for move, actor in EVENT_TRANSITIONS.items() if actor is Actor.OPERATOR] == [
        (FAILED, PROCESSING),
        (COMPLETED, PROCESSING),
    ]
    assert all(target != PENDING for _, target in EVENT_TRANSITIONS)


@pytest.mark.django_db
def test_a_move_made_by_the_wrong_actor_is_refused():
    event = event_in(FAILED)
    before = db_row(event)

    with pytest.raises(InvalidStateTransition) as excinfo:
        events_transition(events=[event], source=FAILED, target=PROCESSING, actor=Actor.SCHEDULER)

    assert "by the scheduler" in str(excinfo.value)
    assert db_row(event) == before


@pytest.mark.django_db
@freeze_time("2027-05-05T13:00:05Z")
def test_complete_records_the_execution_time():
    event = event_in(PROCESSING)

    complete(event)

    assert Event.objects.get(id=event.id).executed_at == datetime(2027, 5, 5, 13, 0, 5, tzinfo=UTC)


@pytest.mark.django_db
def test_fail_records_the_reason():
    event = event_in(PROCESSING)

    fail(event, reason="receiver gone")

    stored = Event.objects.get(id=event.id)
    assert stored.failure_reason == "receiver gone"
    assert stored.executed_at is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "source, target",
    [
        (PENDING, COMPLETED),
        (PENDING, FAILED),
        (PROCESSING, PROCESSING),
        (COMPLETED, PROCESSING),
        (COMPLETED, COMPLETED),
        (COMPLETED, FAILED),
        (FAILED, PROCESSING),
        (FAILED, COMPLETED),
        (FAILED, FAILED),
    ],
)
def test_invalid_transition_is_refused_and_changes_nothing(source, target):
    # given an event in the source state
    event = event_in(source)
    before = db_row(event)

    # when it is asked to move to a state it may not reach from there
    with pytest.raises(InvalidStateTransition) as excinfo:
        do_transition(event, target)

    # then the refusal names the event and its version, and nothing changed
    message = str(excinfo.value)
    assert str(event.id) in message
    assert f"version {event.version}" in message
    assert db_row(event) == before
    assert (event.status, event.version) == (before["status"], before["version"])


@pytest.mark.django_db
def test_pending_to_pending_is_not_a_transition_either():
    event = event_in(PENDING)
    before = db_row(event)

    with pytest.raises(InvalidStateTransition):
        events_transition(events=[event], source=PENDING, target=PENDING, actor=Actor.SCHEDULER)

    assert db_row(event) == before


@pytest.mark.django_db
def test_reschedule_of_a_non_pending_event_is_refused():
    event = event_in(PROCESSING)
    before = db_row(event)
    occurrence = local_send_instant(event.occurrence_date, "Asia/Tokyo")

    with pytest.raises(InvalidStateTransition) as excinfo:
        event_reschedule(event=event, occurrence=occurrence)

    assert str(event.id) in str(excinfo.value)
    assert db_row(event) == before


# --- optimistic locking --------------------------------------------------------------


@pytest.mark.django_db
def test_second_of_two_copies_loses_the_optimistic_lock():
    # given two processes holding the same PENDING event at the same version
    user = UserFactory()
    first = Event.objects.get(user=user, status=PENDING)
    second = Event.objects.get(user=user, status=PENDING)
    assert first.version == second.version == 1

    # when both try to claim it
    start_processing(first)
    with pytest.raises(OptimisticLockError) as excinfo:
        start_processing(second)

    # then the first won and the loser's error names the event and the version it expected
    message = str(excinfo.value)
    assert str(second.id) in message
    assert "version 1" in message
    stored = Event.objects.get(id=first.id)
    assert (stored.status, stored.version) == (PROCESSING, 2)
    # and the loser's in-memory copy was not advanced
    assert (second.status, second.version) == (PENDING, 1)


@pytest.mark.django_db
def test_a_pipelined_transition_is_checked_when_waited_for_and_a_lost_lock_undoes_the_batch():
    # given two PENDING events, one of them read at a version that is no longer current
    current, stale = Event.objects.get(user=UserFactory()), Event.objects.get(user=UserFactory())
    Event.objects.filter(id=stale.id).update(version=stale.version + 1)

    # when the scheduler's move is sent in a pipeline and waited for after other work
    with pytest.raises(OptimisticLockError) as excinfo:
        with transaction.atomic(), pipeline():
            moved = start_events_transition(
                events=[EventRef(current.id, current.version), EventRef(stale.id, stale.version)],
                source=PENDING,
                target=PROCESSING,
                actor=Actor.SCHEDULER,
            )
            moved()

    # then the lost lock is reported as in the unpipelined path, and the batch's other row did not move
    assert f"event {stale.id} at version {stale.version}" in str(excinfo.value)
    assert Event.objects.get(id=current.id).status == PENDING


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_copy_loaded_before_a_reschedule_cannot_be_claimed_although_still_pending():
    # given a scheduler's copy of a PENDING event, read before the user moved zone
    user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    stale = Event.objects.get(user=user)
    user_update(user=user, data={"timezone": "Asia/Tokyo"})
    assert Event.objects.get(id=stale.id).status == PENDING  # same status, newer version

    # when the stale copy is claimed
    with pytest.raises(OptimisticLockError) as excinfo:
        start_processing(stale)

    # then only the version told them apart, and the event is still PENDING
    assert f"version {stale.version}" in str(excinfo.value)
    stored = Event.objects.get(id=stale.id)
    assert (stored.status, stored.version, stored.target_timezone) == (PENDING, 2, "Asia/Tokyo")


@pytest.mark.django_db
def test_stale_copy_cannot_complete_an_event_someone_else_failed():
    # given two copies of a PROCESSING event
    event = event_in(PROCESSING)
    worker_a = Event.objects.get(id=event.id)
    worker_b = Event.objects.get(id=event.id)

    # when one fails it and the other (stale) tries to complete it
    fail(worker_a, reason="too late")
    with pytest.raises(OptimisticLockError) as excinfo:
        complete(worker_b)

    # then the event stays FAILED
    assert f"version {worker_b.version}" in str(excinfo.value)
    stored = Event.objects.get(id=event.id)
    assert (stored.status, stored.version, stored.executed_at) == (FAILED, 3, None)


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_reschedule_with_a_stale_version_loses_the_lock():
    user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    stale = Event.objects.get(user=user)
    user_update(user=user, data={"timezone": "Asia/Tokyo"})  # bumps the version
    occurrence = local_send_instant(stale.occurrence_date, "Europe/London")

    with pytest.raises(OptimisticLockError) as excinfo:
        event_reschedule(event=stale, occurrence=occurrence)

    assert str(stale.id) in str(excinfo.value)
    assert Event.objects.get(id=stale.id).target_timezone == "Asia/Tokyo"


# --- idempotency keys ------------------------------------------------------------------


def test_idempotency_key_is_event_dash_sixteen_hex_characters():
    key = idempotency_key_for(
        user_id=uuid.uuid4(), event_type=EventType.BIRTHDAY, occurrence_date=date(2027, 5, 5)
    )

    assert re.fullmatch(r"event-[0-9a-f]{16}", key), key


def test_idempotency_key_is_deterministic():
    user_id = uuid.UUID("12345678-1234-5678-1234-567812345678")

    keys = {
        idempotency_key_for(
            user_id=uuid.UUID(str(user_id)), event_type=EventType.BIRTHDAY, occurrence_date=date(2027, 5, 5)
        )
        for _ in range(3)
    }

    assert len(keys) == 1


def test_idempotency_key_differs_per_occurrence_date_and_per_user():
    user_a, user_b = uuid.uuid4(), uuid.uuid4()

    def key(user_id, day):
        return idempotency_key_for(user_id=user_id, event_type=EventType.BIRTHDAY, occurrence_date=day)

    keys = [
        key(user_a, date(2027, 5, 5)),
        key(user_a, date(2028, 5, 5)),
        key(user_a, date(2027, 5, 6)),
        key(user_b, date(2027, 5, 5)),
    ]
    assert len(set(keys)) == len(keys)


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_idempotency_key_does_not_depend_on_the_timezone():
    # given the same birthday scheduled in two zones
    user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    key_in_new_york = Event.objects.get(user=user).idempotency_key
    user_update(user=user, data={"timezone": "Australia/Sydney"})

    # then the event's key did not change with the zone, and is the computed one
    event = Event.objects.get(user=user)
    assert event.target_timezone == "Australia/Sydney"
    assert (
        event.idempotency_key
        == key_in_new_york
        == idempotency_key_for(
            user_id=user.id, event_type=EventType.BIRTHDAY, occurrence_date=date(2027, 5, 5)
        )
    )


# --- scheduling on user save (the post_save receiver) ----------------------------------


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_creating_a_user_with_the_factory_creates_exactly_one_pending_event():
    user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="Europe/London")

    events = list(Event.objects.filter(user=user))
    assert len(events) == 1
    assert events[0].status == PENDING
    assert events[0].event_type == EventType.BIRTHDAY
    assert events[0].occurrence_date == date(2027, 5, 5)
    assert events[0].target_timestamp_utc == datetime(2027, 5, 5, 8, 0, tzinfo=UTC)


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_user_create_service_creates_exactly_one_pending_event():
    user = user_create(
        first_name=" Ada ", last_name="Lovelace", date_of_birth=date(1990, 12, 10), timezone="Asia/Tokyo"
    )

    assert user.first_name == "Ada"
    event = Event.objects.get(user=user)
    assert (event.status, event.occurrence_date) == (PENDING, date(2027, 12, 10))


@pytest.mark.django_db(transaction=True)
def test_user_is_not_stored_when_its_event_cannot_be_created():
    # given event creation breaks
    with mock.patch.object(signals, "events_create_first", side_effect=RuntimeError("boom")):
        # when a user is created
        with pytest.raises(RuntimeError, match="boom"):
            user_create(
                first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 5, 5), timezone="UTC"
            )

    # then neither the user nor any event was committed
    assert User.objects.count() == 0
    assert Event.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_factory_user_is_not_stored_when_its_event_cannot_be_created():
    with mock.patch.object(signals, "events_create_first", side_effect=RuntimeError("boom")):
        with pytest.raises(RuntimeError):
            UserFactory()

    assert User.objects.count() == 0


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_saving_a_user_unchanged_does_not_touch_its_event():
    user = UserFactory(date_of_birth=date(1990, 5, 5))
    before = Event.objects.values().get(user=user)

    user.save()

    assert Event.objects.values().get(user=user) == before


@pytest.mark.django_db
def test_editing_a_user_leaves_a_processing_event_alone_and_logs_a_warning(scheduling_logs):
    # given a user whose 2027-05-05 birthday has been claimed by the scheduler
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    processing = start_processing(Event.objects.get(user=user))
    before = db_row(processing)

    # when the user's zone and date of birth are edited while it is being delivered
    with freeze_time("2027-05-05T13:00:01Z"):
        user_update(user=user, data={"timezone": "Asia/Tokyo", "date_of_birth": date(1990, 8, 10)})

    # then the PROCESSING event is exactly as it was
    assert db_row(processing) == before
    assert before["status"] == PROCESSING
    # and a warning names it
    warnings = [r for r in scheduling_logs.records if r.levelno == logging.WARNING]
    assert any(str(processing.id) in TextFormatter().format(r) for r in warnings), [
        TextFormatter().format(r) for r in scheduling_logs.records
    ]


@pytest.mark.django_db
def test_next_pending_occurrence_after_a_processing_one_follows_the_new_data():
    # given a user whose 2027-05-05 birthday is PROCESSING and who has no PENDING event
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    processing = start_processing(Event.objects.get(user=user))
    assert not Event.objects.filter(user=user, status=PENDING).exists()

    # when the date of birth and zone are corrected
    with freeze_time("2027-05-05T13:00:01Z"):
        user_update(user=user, data={"timezone": "Asia/Tokyo", "date_of_birth": date(1990, 8, 10)})

    # then the next PENDING event is for the new birthday in the new zone
    pending = Event.objects.get(user=user, status=PENDING)
    assert pending.id != processing.id
    assert pending.occurrence_date == date(2027, 8, 10)
    assert pending.target_timezone == "Asia/Tokyo"
    assert pending.target_timestamp_utc == datetime(2027, 8, 10, 0, 0, tzinfo=UTC)
    assert Event.objects.filter(user=user).count() == 2


@pytest.mark.django_db
def test_timezone_edit_during_processing_does_not_reschedule_the_same_birthday_again():
    # given the 2027-05-05 birthday is being delivered
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    start_processing(Event.objects.get(user=user))

    # when only the zone changes
    with freeze_time("2027-05-05T13:00:01Z"):
        user_update(user=user, data={"timezone": "Pacific/Pago_Pago"})

    # then the next PENDING birthday is next year's, not 2027-05-05 a second time
    pending = Event.objects.get(user=user, status=PENDING)
    assert pending.occurrence_date == date(2028, 5, 5)
    assert pending.target_timezone == "Pacific/Pago_Pago"


@pytest.mark.django_db
def test_the_scheduling_signal_is_skipped_for_raw_fixture_loads():
    from django.db.models.signals import post_save

    user = User(first_name="A", last_name="B", date_of_birth=date(1990, 1, 1), timezone="UTC")
    User.objects.bulk_create([user])

    post_save.send(sender=User, instance=user, created=True, raw=True, using="default", update_fields=None)

    assert not Event.objects.filter(user=user).exists()


# --- events_create_missing ---------------------------------------------------------------


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_events_create_missing_schedules_users_created_without_signals():
    # given users inserted with bulk_create (no post_save), and one normal user
    bulk = User.objects.bulk_create(
        [
            User(first_name="A", last_name="One", date_of_birth=date(1990, 5, 5), timezone="Europe/London"),
            User(first_name="B", last_name="Two", date_of_birth=date(1985, 2, 28), timezone="Asia/Tokyo"),
        ]
    )
    normal = UserFactory()
    normal_event = Event.objects.values().get(user=normal)
    assert not Event.objects.filter(user__in=bulk).exists()

    # when the reconciliation runs
    created = events_create_missing()

    # then each bulk user got exactly one PENDING event and the normal user's is untouched
    assert created == 2
    first = Event.objects.get(user=bulk[0])
    second = Event.objects.get(user=bulk[1])
    assert (first.status, first.occurrence_date) == (PENDING, date(2027, 5, 5))
    assert first.target_timestamp_utc == datetime(2027, 5, 5, 8, 0, tzinfo=UTC)
    assert (second.status, second.occurrence_date) == (PENDING, date(2027, 2, 28))
    assert Event.objects.values().get(user=normal) == normal_event


@pytest.mark.django_db
@freeze_time("2027-01-10T12:00:00Z")
def test_events_create_missing_is_a_no_op_the_second_time():
    User.objects.bulk_create(
        [User(first_name="A", last_name="One", date_of_birth=date(1990, 5, 5), timezone="UTC")]
    )

    assert events_create_missing() == 1
    assert events_create_missing() == 0
    assert Event.objects.count() == 1


@pytest.mark.django_db
def test_events_create_missing_schedules_after_the_last_handled_occurrence():
    # given a user whose 2027 birthday is COMPLETED and who has no PENDING event
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="UTC")
    event = start_processing(Event.objects.get(user=user))
    complete(event)

    # when the reconciliation runs before that birthday's send time has even passed
    with freeze_time("2027-05-02T00:00:00Z"):
        created = events_create_missing()

    # then the next birthday is 2028's, not 2027's again
    assert created == 1
    assert Event.objects.get(user=user, status=PENDING).occurrence_date == date(2028, 5, 5)


@pytest.mark.django_db
@freeze_time("2027-05-05T06:00:00Z")
def test_deliver_now_is_not_undone_when_the_user_is_saved_again():
    # given a recipient whose birthday is today, 07:00 in London, two hours before its send time,
    # sent now by an operator
    user = UserFactory(timezone="Europe/London", date_of_birth=date(1990, 5, 5))
    event = user.events.get()
    event_deliver_now(event=event, operator="support")

    # when the recipient is saved again
    user_update(user=user, data={"first_name": "Renamed"})

    # then today's occurrence stays due now
    event.refresh_from_db()
    assert event.status == EventStatus.PENDING
    assert event.occurrence_date == date(2027, 5, 5)
    assert event.target_timestamp_utc == datetime(2027, 5, 5, 6, tzinfo=UTC)


@pytest.mark.django_db
@freeze_time("2027-05-04T06:00:00Z")
def test_deliver_now_refuses_an_occurrence_that_is_not_today_and_changes_nothing():
    # given a recipient whose birthday is tomorrow
    user = UserFactory(timezone="Europe/London", date_of_birth=date(1990, 5, 5))
    event = user.events.get()
    before = Event.objects.values().get(pk=event.pk)

    # when an operator asks to deliver it now, then it is refused and the event untouched
    with pytest.raises(InvalidStateTransition, match="not of today"):
        event_deliver_now(event=event, operator="support")
    assert Event.objects.values().get(pk=event.pk) == before


@pytest.mark.django_db
@freeze_time("2027-05-05T06:00:00Z")
def test_deliver_now_refuses_a_paused_recipients_occurrence_which_the_claim_would_fail():
    # given a paused recipient whose birthday is today
    user = UserFactory(timezone="Europe/London", date_of_birth=date(1990, 5, 5))
    user_update(user=user, data={"paused": True}, by="ops")
    event = user.events.get()
    before = Event.objects.values().get(pk=event.pk)

    # when an operator asks to deliver it now, then it is refused and the event untouched
    with pytest.raises(InvalidStateTransition, match="paused"):
        event_deliver_now(event=Event.objects.select_related("user").get(pk=event.pk), operator="support")
    assert Event.objects.values().get(pk=event.pk) == before


@pytest.mark.django_db
@freeze_time("2027-05-05T06:00:00Z")
def test_deliver_now_refuses_while_the_event_type_is_paused_for_everyone():
    from scheduling.services.pauses import event_type_pause

    # given today's birthday of a recipient, and birthdays paused for everyone
    user = UserFactory(timezone="Europe/London", date_of_birth=date(1990, 5, 5))
    event_type_pause(event_type=EventType.BIRTHDAY, by="ops")
    event = user.events.get()

    # when an operator asks to deliver it now, then it is refused
    with pytest.raises(InvalidStateTransition, match="paused for everyone"):
        event_deliver_now(event=event, operator="support")
    assert Event.objects.get(pk=event.pk).target_timestamp_utc == datetime(2027, 5, 5, 8, tzinfo=UTC)


@pytest.mark.django_db
def test_the_reconcile_reads_recipients_in_key_order():
    """In key order PostgreSQL can merge the users' and the pending events' key indexes
    (one pass over each) instead of probing the events' index once per recipient;
    in the recipients' default order (created_at) it cannot."""
    UserFactory()
    with CaptureQueriesContext(connection) as captured:
        events_create_missing()
    scans = [
        q["sql"]
        for q in captured.captured_queries
        if "NOT EXISTS" in q["sql"] and 'FROM "users_user"' in q["sql"]
    ]
    assert scans, "the reconcile ran no anti-join over the recipients"
    for sql in scans:
        # The key is the only column selected: Django names it by position.
        assert re.search(r'ORDER BY (1|"users_user"\."id") ASC LIMIT \d+$', sql.rstrip()), sql
