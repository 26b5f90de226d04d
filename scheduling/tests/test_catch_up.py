"""The catch-up window: a recipient who arrives after the day's send time still gets the day's message, once."""

import io
from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import override_settings
from django.urls import reverse
from freezegun import freeze_time

from delivery.dispatch.retention import history_cutoff, history_prune_batches
from scheduling.apps import _check_catch_up_windows
from scheduling.models import DeletedRecipientOccurrence, Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for
from scheduling.services.transitions import Actor, events_transition
from users.models import User
from users.services import user_create, user_erase, user_update

pytestmark = pytest.mark.django_db

USERS_URL = "/api/v1/users/"
# Kolkata is UTC+05:30 all year: 09:00 there is 03:30Z, 11:00 is 05:30Z.
BIRTHDAY = date(2027, 5, 5)
AT_1100_LOCAL = "2027-05-05T05:30:00Z"
NINE_LOCAL = datetime(2027, 5, 5, 3, 30, tzinfo=UTC)


def payload(**overrides) -> dict:
    return {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-05-05",
        "timezone": "Asia/Kolkata",
        **overrides,
    }


def pending(user_id, event_type=EventType.BIRTHDAY) -> Event:
    return Event.objects.get(user_id=user_id, event_type=event_type, status=EventStatus.PENDING)


def handle(event: Event) -> None:
    """Claim and complete the event, as the scheduler and a worker would."""
    events_transition(
        events=[event], source=EventStatus.PENDING, target=EventStatus.PROCESSING, actor=Actor.SCHEDULER
    )
    events_transition(
        events=[event], source=EventStatus.PROCESSING, target=EventStatus.COMPLETED, actor=Actor.WORKER
    )


# --- creation -------------------------------------------------------------------------------


@freeze_time(AT_1100_LOCAL)
def test_a_recipient_created_at_1100_on_their_birthday_gets_todays_greeting_due_now_under_its_usual_key(
    api_client,
):
    response = api_client.post(USERS_URL, payload(), format="json")

    assert response.status_code == 201, response.content
    event = pending(response.json()["id"])
    assert event.occurrence_date == BIRTHDAY
    assert event.target_timestamp_utc == NINE_LOCAL  # its send time, passed: due at once
    assert event.idempotency_key == idempotency_key_for(
        user_id=event.user_id, event_type=EventType.BIRTHDAY, occurrence_date=BIRTHDAY
    )
    assert response.json()["next_event"]["occurrence_date"] == "2027-05-05"


@freeze_time("2027-05-06T05:30:00Z")
def test_a_recipient_created_the_day_after_gets_next_years(api_client):
    response = api_client.post(USERS_URL, payload(), format="json")

    assert pending(response.json()["id"]).occurrence_date == date(2028, 5, 5)


@pytest.mark.parametrize(
    ("now", "occurrence"),
    [
        ("2027-05-05T15:00:00Z", BIRTHDAY),  # 20:30 local, 11.5 h after 09:00
        ("2027-05-05T16:00:00Z", date(2028, 5, 5)),  # 21:30 local, 12.5 h after
    ],
)
def test_the_window_is_12_hours_by_default(now, occurrence):
    with freeze_time(now):
        user = user_create(**payload(date_of_birth=date(1990, 5, 5)))

    assert pending(user.id).occurrence_date == occurrence


@freeze_time(AT_1100_LOCAL)
@override_settings(EVENT_CATCH_UP_WINDOW=timedelta(0))
def test_a_window_of_0_is_the_behaviour_without_catch_up():
    user = user_create(**payload(date_of_birth=date(1990, 5, 5)))

    assert pending(user.id).occurrence_date == date(2028, 5, 5)


@freeze_time(AT_1100_LOCAL)
@override_settings(EVENT_CATCH_UP_WINDOW_BY_TYPE={EventType.ANNIVERSARY: timedelta(0)})
def test_each_event_type_has_its_own_window():
    user = user_create(**payload(date_of_birth=date(1990, 5, 5), anniversary_date=date(2015, 5, 5)))

    assert pending(user.id, EventType.BIRTHDAY).occurrence_date == BIRTHDAY
    assert pending(user.id, EventType.ANNIVERSARY).occurrence_date == date(2028, 5, 5)


@freeze_time(AT_1100_LOCAL)
def test_the_window_counts_from_the_recipients_own_send_time():
    # 06:00 local was 5 h ago, inside the window; 23:00 is still ahead today.
    early = user_create(**payload(date_of_birth=date(1990, 5, 5), send_time="06:00"))
    late = user_create(**payload(date_of_birth=date(1990, 5, 5), send_time="23:00"))

    assert pending(early.id).target_timestamp_local == "2027-05-05T06:00:00+05:30"
    assert pending(late.id).target_timestamp_local == "2027-05-05T23:00:00+05:30"


@freeze_time(AT_1100_LOCAL)
def test_an_import_at_1100_on_the_birthday_gets_todays_greeting(tmp_path):
    path = tmp_path / "users.csv"
    path.write_text("first_name,last_name,date_of_birth,timezone\nAda,Lovelace,1990-05-05,Asia/Kolkata\n")

    call_command("import_users", str(path), stdout=io.StringIO())

    event = pending(User.objects.get().id)
    assert (event.occurrence_date, event.target_timestamp_utc) == (BIRTHDAY, NINE_LOCAL)


def test_a_recipient_added_in_the_console_at_1100_on_their_birthday_gets_todays_greeting(console):
    # The console fixture logged in at the real time; a frozen clock before it keeps that session valid.
    with freeze_time("2026-05-05T05:30:00Z"):
        response = console.post(
            reverse("admin:users_user_add"),
            {
                "first_name": "Ada",
                "last_name": "Lovelace",
                "date_of_birth": "1990-05-05",
                "timezone": "Asia/Kolkata",
            },
        )

    assert response.status_code == 302
    event = pending(User.objects.get().id)
    assert (event.occurrence_date, event.target_timestamp_utc) == (
        date(2026, 5, 5),
        datetime(2026, 5, 5, 3, 30, tzinfo=UTC),
    )


# --- edits ------------------------------------------------------------------------------


def test_a_date_of_birth_corrected_to_today_at_1100_gets_todays_greeting(api_client):
    with freeze_time("2027-04-01T00:00:00Z"):
        user = user_create(**payload(date_of_birth=date(1990, 6, 1)))

    with freeze_time(AT_1100_LOCAL):
        response = api_client.patch(f"{USERS_URL}{user.id}/", {"date_of_birth": "1990-05-05"}, format="json")

    assert response.status_code == 200, response.content
    event = pending(user.id)
    assert (event.occurrence_date, event.target_timestamp_utc) == (BIRTHDAY, NINE_LOCAL)
    assert Event.objects.filter(user=user).count() == 1


def test_an_edit_after_todays_greeting_went_out_never_brings_it_back():
    with freeze_time("2027-04-01T00:00:00Z"):
        user = user_create(**payload(date_of_birth=date(1990, 5, 5)))
    with freeze_time("2027-05-05T03:30:00Z"):
        handle(pending(user.id))
        user_update(
            user=user, data={"first_name": "Adah"}
        )  # the claim's next occurrence, as the scheduler makes it

    with freeze_time(AT_1100_LOCAL):
        user_update(user=user, data={"timezone": "Asia/Colombo", "send_time": "10:00"})

    assert pending(user.id).occurrence_date == date(2028, 5, 5)
    assert Event.objects.filter(user=user, occurrence_date=BIRTHDAY).count() == 1


# --- deleted and created again --------------------------------------------------------------


def greeted_then_deleted(api_client, *, external_id: str = "crm-7") -> User:
    """A recipient imported at 11:00 on their birthday, greeted, then deleted through the API at 14:00."""
    with freeze_time(AT_1100_LOCAL):
        user = user_create(**payload(date_of_birth=date(1990, 5, 5), external_id=external_id))
        handle(pending(user.id))
    with freeze_time("2027-05-05T08:30:00Z"):
        assert api_client.delete(f"{USERS_URL}{user.id}/").status_code == 204
    return user


def test_a_recipient_deleted_and_imported_again_the_same_afternoon_is_not_greeted_twice(api_client, tmp_path):
    first = greeted_then_deleted(api_client)
    path = tmp_path / "users.csv"
    path.write_text(
        "external_id,first_name,last_name,date_of_birth,timezone\ncrm-7,Ada,Lovelace,1990-05-05,Asia/Kolkata\n"
    )

    with freeze_time("2027-05-05T10:30:00Z"):
        call_command("import_users", str(path), stdout=io.StringIO())

    again = User.objects.get(external_id="crm-7")
    assert again.id != first.id
    assert pending(again.id).occurrence_date == date(2028, 5, 5)
    assert not Event.objects.filter(occurrence_date=BIRTHDAY).exists()


def test_a_recipient_deleted_and_created_again_through_the_api_is_not_greeted_twice(api_client):
    greeted_then_deleted(api_client)

    with freeze_time("2027-05-05T10:30:00Z"):
        response = api_client.post(
            USERS_URL, payload(external_id="crm-7", timezone="America/Los_Angeles"), format="json"
        )

    # Los Angeles' 09:00 today is still ahead, but the day's greeting went out already.
    assert response.json()["next_event"]["occurrence_date"] == "2028-05-05"


def test_what_a_deletion_remembers_names_no_one_and_another_external_id_is_greeted(api_client):
    greeted_then_deleted(api_client, external_id="crm-7")

    remembered = DeletedRecipientOccurrence.objects.get()
    assert "crm-7" not in remembered.recipient_digest and len(remembered.recipient_digest) == 64
    assert (remembered.event_type, remembered.occurrence_date) == (EventType.BIRTHDAY, BIRTHDAY)
    with freeze_time("2027-05-05T10:30:00Z"):
        other = user_create(**payload(date_of_birth=date(1990, 5, 5), external_id="crm-8"))
    assert pending(other.id).occurrence_date == BIRTHDAY


def test_a_recipient_deleted_before_their_greeting_went_out_gets_it_when_created_again():
    with freeze_time("2027-04-01T00:00:00Z"):
        user = user_create(**payload(date_of_birth=date(1990, 5, 5), external_id="crm-7"))
    with freeze_time("2027-05-05T03:00:00Z"):
        user_erase(user=user)

    with freeze_time(AT_1100_LOCAL):
        again = user_create(**payload(date_of_birth=date(1990, 5, 5), external_id="crm-7"))

    assert not DeletedRecipientOccurrence.objects.exists()
    assert pending(again.id).occurrence_date == BIRTHDAY


def test_the_history_prune_forgets_what_deletions_left_once_it_has_expired(api_client):
    greeted_then_deleted(api_client)
    expires = DeletedRecipientOccurrence.objects.get().expires_at
    # 2027-05-06 12:00 UTC (the last send time of May 5 anywhere) plus the 12-hour window
    assert expires == datetime(2027, 5, 7, 0, 0, tzinfo=UTC)

    for now, left in ((expires - timedelta(minutes=1), 1), (expires, 0)):
        with freeze_time(now):
            list(history_prune_batches(cutoff=history_cutoff(now=now)))
        assert DeletedRecipientOccurrence.objects.count() == left


# --- settings ---------------------------------------------------------------------------------


def test_a_window_for_a_type_that_does_not_exist_stops_start_up(settings):
    settings.EVENT_CATCH_UP_WINDOW_BY_TYPE = {"WEDDING": timedelta(hours=1)}

    with pytest.raises(ImproperlyConfigured, match="WEDDING, which is no event type"):
        _check_catch_up_windows()


@freeze_time("2027-05-05T09:30:00Z")  # 15:00 in Kolkata, 6 h after its 09:00
def test_a_window_longer_than_the_maximum_lateness_is_cut_to_it(settings):
    settings.EVENT_MAX_LATENESS = timedelta(hours=5)

    user = user_create(**payload(date_of_birth=date(1990, 5, 5)))

    assert pending(user.id).occurrence_date == date(2028, 5, 5)
