"""Greetings paused per recipient and per event type: through the API and the console, and at the claim."""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from delivery.destinations.services import destinations_seed_default
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery
from monitoring.tests.test_metrics import samples
from scheduling.models import Event, EventStatus, EventType, EventTypePause
from scheduling.pauses import EVENT_TYPE_PAUSED, RECIPIENT_PAUSED
from scheduling.services.pauses import event_type_pause, event_type_resume
from users.models import User
from users.services import user_create, user_update

# The claim sends to destinations: WEBHOOK_URL seeds the default one.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("default_destination")]

USERS_URL = "/api/v1/users/"
TYPES_URL = "/api/v1/event-types/"
# Europe/London in May is UTC+1: 09:00 there is 08:00Z.
BEFORE = "2027-04-01T00:00:00Z"
NINE_LOCAL = datetime(2027, 5, 5, 8, 0, tzinfo=UTC)


def detail_url(user_id) -> str:
    return f"{USERS_URL}{user_id}/"


def londoner(**fields) -> User:
    with freeze_time(BEFORE):
        return user_create(
            **{
                "first_name": "Ada",
                "last_name": "Lovelace",
                "date_of_birth": date(1990, 5, 5),
                "timezone": "Europe/London",
                **fields,
            }
        )


def pending(user, event_type=EventType.BIRTHDAY) -> Event:
    return Event.objects.get(user=user, event_type=event_type, status=EventStatus.PENDING)


def claim_at(moment: datetime):
    with freeze_time(moment):
        return deliveries_enqueue_due(now=moment)


def pause(user, at: str, by: str = "ops") -> User:
    with freeze_time(at):
        return user_update(user=user, data={"paused": True}, by=by)


def resume(user, at: str, by: str = "ops") -> User:
    with freeze_time(at):
        return user_update(user=user, data={"paused": False}, by=by)


# --- the claim ---------------------------------------------------------------------------------


def test_a_paused_recipients_greeting_is_not_sent_but_failed_with_its_reason_and_the_next_one_scheduled():
    user = pause(londoner(), at="2027-05-01T00:00:00Z")
    todays = pending(user)

    result = claim_at(NINE_LOCAL + timedelta(seconds=1))

    assert (result.queued, result.paused, result.claimed) == (0, 1, 1)
    todays.refresh_from_db()
    assert (todays.status, todays.failure_reason) == (EventStatus.FAILED, RECIPIENT_PAUSED)
    assert not Delivery.objects.exists()
    assert pending(user).occurrence_date == date(2028, 5, 5)


def test_after_a_resume_the_next_occurrence_whose_send_time_has_not_passed_is_sent():
    user = pause(londoner(), at="2027-05-01T00:00:00Z")
    claim_at(NINE_LOCAL + timedelta(seconds=1))
    resume(user, at="2027-05-05T10:00:00Z")

    result = claim_at(datetime(2028, 5, 5, 8, 0, 1, tzinfo=UTC))

    assert result.queued == 1
    assert Delivery.objects.get().event.occurrence_date == date(2028, 5, 5)


def test_an_occurrence_whose_time_came_while_paused_is_failed_even_when_claimed_after_the_resume():
    # The scheduler was stopped from before 09:00 until after the resume.
    user = pause(londoner(), at="2027-05-05T07:00:00Z")
    resume(user, at="2027-05-05T10:00:00Z")

    result = claim_at(datetime(2027, 5, 5, 10, 0, 5, tzinfo=UTC))

    assert (result.queued, result.paused) == (0, 1)
    assert Event.objects.get(user=user, occurrence_date=date(2027, 5, 5)).failure_reason == RECIPIENT_PAUSED
    assert pending(user).occurrence_date == date(2028, 5, 5)


def test_a_pause_that_ended_before_the_send_time_holds_nothing_back():
    user = pause(londoner(), at="2027-05-05T06:00:00Z")
    resume(user, at="2027-05-05T07:00:00Z")

    assert claim_at(NINE_LOCAL + timedelta(seconds=1)).queued == 1


def test_a_paused_event_type_holds_back_that_type_for_everyone_and_no_other():
    user = londoner(anniversary_date=date(2015, 5, 5))
    with freeze_time("2027-05-01T00:00:00Z"):
        event_type_pause(event_type=EventType.ANNIVERSARY, by="ops")

    result = claim_at(NINE_LOCAL + timedelta(seconds=1))

    assert (result.queued, result.paused) == (1, 1)
    assert Delivery.objects.get().event.event_type == EventType.BIRTHDAY
    anniversary = Event.objects.get(
        user=user, event_type=EventType.ANNIVERSARY, occurrence_date=date(2027, 5, 5)
    )
    assert (anniversary.status, anniversary.failure_reason) == (EventStatus.FAILED, EVENT_TYPE_PAUSED)
    with freeze_time("2027-06-01T00:00:00Z"):
        event_type_resume(event_type=EventType.ANNIVERSARY, by="ops")
    assert claim_at(datetime(2028, 5, 5, 8, 0, 1, tzinfo=UTC)).queued == 2


def test_the_claim_reads_the_pauses_without_a_statement_per_recipient():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    destinations_seed_default()  # before, not within, the first claim measured
    statements = []
    for count in (2, 12):
        Event.objects.all().delete()
        User.objects.all().delete()
        for i in range(count):
            user = londoner(first_name=f"U{i}")
            if i % 2:
                pause(user, at="2027-05-01T00:00:00Z")
        with CaptureQueriesContext(connection) as captured:
            assert claim_at(NINE_LOCAL + timedelta(seconds=1)).claimed == count
        statements.append(len(captured.captured_queries))

    assert statements[0] == statements[1]


# --- the API --------------------------------------------------------------------------------


def test_patching_paused_records_who_and_when_and_changes_no_event(api_client):
    user = londoner()
    before = Event.objects.values().get(user=user)

    with freeze_time("2027-05-01T10:00:00Z"):
        response = api_client.patch(detail_url(user.id), {"paused": True}, format="json")

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["paused"], body["paused_by"], body["paused_at"]) == (
        True,
        "operator",
        "2027-05-01T10:00:00Z",
    )
    assert (body["resumed_at"], body["resumed_by"], body["version"]) == (None, "", user.version + 1)
    assert list(Event.objects.values()) == [before]

    with freeze_time("2027-05-02T10:00:00Z"):
        body = api_client.patch(detail_url(user.id), {"paused": False}, format="json").json()
    assert (body["paused"], body["paused_at"], body["resumed_at"], body["resumed_by"]) == (
        False,
        "2027-05-01T10:00:00Z",
        "2027-05-02T10:00:00Z",
        "operator",
    )


def test_a_recipient_can_be_created_paused(api_client):
    response = api_client.post(
        USERS_URL,
        {
            "first_name": "Ada",
            "last_name": "L",
            "date_of_birth": "1990-05-05",
            "timezone": "Europe/London",
            "paused": True,
        },
        format="json",
    )

    assert response.status_code == 201, response.content
    assert User.objects.get().paused and User.objects.get().paused_by == "operator"


def test_pausing_a_paused_recipient_changes_nothing(api_client):
    user = pause(londoner(), at="2027-05-01T00:00:00Z", by="someone")

    response = api_client.patch(detail_url(user.id), {"paused": True}, format="json")

    assert response.json()["paused_by"] == "someone"
    assert response.json()["version"] == user.version


@pytest.mark.parametrize("bad", ["true", 1, 0, "yes", None, [], {}])
def test_a_paused_flag_that_is_not_a_boolean_is_400_naming_it_and_changes_nothing(api_client, bad):
    user = londoner()
    user_before = User.objects.values().get(id=user.id)

    response = api_client.patch(detail_url(user.id), {"paused": bad}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"paused"}
    assert User.objects.values().get(id=user.id) == user_before


def test_the_database_refuses_a_pause_without_its_actor_or_a_resume_without_a_pause():
    user = londoner()
    for bad in ({"paused_at": timezone.now()}, {"resumed_at": timezone.now(), "resumed_by": "x"}):
        with pytest.raises(IntegrityError), transaction.atomic():
            User.objects.filter(pk=user.pk).update(**bad)


# --- event types through the API -------------------------------------------------------------


@pytest.fixture
def types_client(api_client, operator):
    operator.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_eventtypepause", "change_eventtypepause"])
    )
    return api_client


def test_the_event_types_are_listed_with_their_pauses(types_client):
    response = types_client.get(TYPES_URL)

    assert response.status_code == 200, response.content
    assert [(row["event_type"], row["paused"]) for row in response.json()["results"]] == [
        ("ANNIVERSARY", False),
        ("BIRTHDAY", False),
    ]


def test_an_event_type_is_paused_and_resumed_through_the_api_recording_who(types_client):
    paused = types_client.patch(f"{TYPES_URL}BIRTHDAY/", {"paused": True}, format="json")
    resumed = types_client.patch(f"{TYPES_URL}BIRTHDAY/", {"paused": False}, format="json")

    assert paused.status_code == 200, paused.content
    assert (paused.json()["paused"], paused.json()["paused_by"]) == (True, "operator")
    assert (resumed.json()["paused"], resumed.json()["resumed_by"]) == (False, "operator")


@pytest.mark.parametrize(
    ("body", "field"), [({"paused": "true"}, "paused"), ({}, "paused"), ({"pause": True}, "pause")]
)
def test_a_bad_event_type_change_is_400_naming_the_field_and_changes_nothing(types_client, body, field):
    response = types_client.patch(f"{TYPES_URL}BIRTHDAY/", body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert not EventTypePause.objects.get(event_type="BIRTHDAY").paused


def test_an_unknown_event_type_is_404_and_an_account_without_the_permission_403(
    types_client, api_client, operator
):
    assert types_client.patch(f"{TYPES_URL}WEDDING/", {"paused": True}, format="json").status_code == 404
    operator.user_permissions.remove(*Permission.objects.filter(codename="change_eventtypepause"))
    assert api_client.patch(f"{TYPES_URL}BIRTHDAY/", {"paused": True}, format="json").status_code == 403


# --- the console ---------------------------------------------------------------------------


def test_an_operator_pauses_and_resumes_recipients_from_the_list_and_the_log_says_who(console):
    user = londoner()
    changelist = reverse("admin:users_user_changelist")

    console.post(changelist, {"action": "pause_greetings", "_selected_action": [str(user.pk)]})
    user.refresh_from_db()
    assert (user.paused, user.paused_by) == (True, "ops-alice")
    assert "Paused by ops-alice" in console.get(changelist).content.decode()

    console.post(changelist, {"action": "resume_greetings", "_selected_action": [str(user.pk)]})
    user.refresh_from_db()
    assert (user.paused, user.resumed_by) == (False, "ops-alice")
    assert sorted(
        LogEntry.objects.filter(object_id=str(user.pk)).values_list("change_message", flat=True)
    ) == [
        "Paused greetings",
        "Resumed greetings",
    ]


def test_an_operator_pauses_an_event_type_in_the_console(console):
    changelist = reverse("admin:scheduling_eventtypepause_changelist")
    row = EventTypePause.objects.get(event_type=EventType.ANNIVERSARY)

    response = console.post(
        changelist, {"action": "pause", "_selected_action": [str(row.pk)], "confirmed": "yes"}
    )

    assert response.status_code == 302
    row.refresh_from_db()
    assert (row.paused, row.paused_by) == (True, "ops-alice")
    assert "Paused: held back" in console.get(changelist).content.decode()


# --- the metrics ----------------------------------------------------------------------------


def test_the_metrics_count_the_events_held_back_in_the_last_hour(client, settings):
    settings.METRICS_TOKEN = ""
    user = londoner(anniversary_date=date(2015, 5, 5), external_id="x1")
    londoner(first_name="Bea", external_id="x2")
    pause(user, at="2027-05-01T00:00:00Z")
    with freeze_time("2027-05-01T00:00:00Z"):
        event_type_pause(event_type=EventType.BIRTHDAY, by="ops")
    claim_at(NINE_LOCAL + timedelta(seconds=1))

    with freeze_time(NINE_LOCAL + timedelta(minutes=5)):
        values = samples(client.get("/metrics"))

    assert values[("birthday_events_paused_last_hour", (("paused", "recipient"),))] == 2
    assert values[("birthday_events_paused_last_hour", (("paused", "event_type"),))] == 1
