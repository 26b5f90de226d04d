"""A recipient's own send time: validated on every path, and the instant their events are due."""

import io
from datetime import UTC, date, datetime, time

import pytest
from django.core.management import CommandError, call_command
from freezegun import freeze_time

from scheduling.models import Event, EventStatus
from scheduling.services.transitions import Actor, events_transition
from users.models import User
from users.services import user_create, user_update
from users.tests.factories import UserFactory

USERS_URL = "/api/v1/users/"

pytestmark = pytest.mark.django_db


def detail_url(user_id) -> str:
    return f"{USERS_URL}{user_id}/"


def payload(**overrides) -> dict:
    return {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-05-05",
        "timezone": "Asia/Kolkata",
        **overrides,
    }


def pending(user_id) -> Event:
    return Event.objects.get(user_id=user_id, status=EventStatus.PENDING)


# --- the API ---------------------------------------------------------------------------


@freeze_time("2027-01-10T12:00:00Z")
def test_a_1030_send_time_in_kolkata_is_due_at_0500_utc(api_client):
    response = api_client.post(USERS_URL, payload(send_time="10:30"), format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    assert body["send_time"] == "10:30"
    assert body["next_event"]["target_timestamp_utc"] == "2027-05-05T05:00:00Z"
    assert body["next_event"]["target_timestamp_local"] == "2027-05-05T10:30:00+05:30"
    assert pending(body["id"]).target_timestamp_utc == datetime(2027, 5, 5, 5, 0, tzinfo=UTC)


@freeze_time("2027-01-10T12:00:00Z")
def test_without_a_send_time_the_default_applies_and_reads_back_as_null(api_client):
    response = api_client.post(USERS_URL, payload(), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["send_time"] is None
    assert response.json()["next_event"]["target_timestamp_local"] == "2027-05-05T09:00:00+05:30"


@pytest.mark.parametrize(
    "bad", ["25:00", "9am", "09:00:00.5", "", "9:30", "09:30:00", " 09:30", "09:60", 930, True, ["09:30"]]
)
def test_a_bad_send_time_is_400_naming_the_field_and_creates_nothing(api_client, bad):
    response = api_client.post(USERS_URL, payload(send_time=bad), format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"send_time"}
    assert not User.objects.exists() and not Event.objects.exists()


@freeze_time("2027-01-10T12:00:00Z")
@pytest.mark.parametrize("bad", ["25:00", "9am", "09:00:00.5", ""])
def test_a_bad_send_time_in_a_patch_changes_neither_the_recipient_nor_the_event(api_client, bad):
    user = user_create(
        first_name="Ada", last_name="L", date_of_birth=date(1990, 5, 5), timezone="Asia/Kolkata"
    )
    user_before = User.objects.values().get(id=user.id)
    event_before = Event.objects.values().get(user=user)

    response = api_client.patch(detail_url(user.id), {"send_time": bad}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"send_time"}
    assert User.objects.values().get(id=user.id) == user_before
    assert list(Event.objects.values()) == [event_before]


@freeze_time("2027-01-10T12:00:00Z")
def test_a_new_send_time_moves_the_pending_event_keeping_its_occurrence_and_key(api_client):
    user = user_create(
        first_name="Ada", last_name="L", date_of_birth=date(1990, 5, 5), timezone="Asia/Kolkata"
    )
    before = pending(user.id)

    response = api_client.patch(detail_url(user.id), {"send_time": "10:30"}, format="json")

    assert response.status_code == 200, response.content
    after = pending(user.id)
    assert (after.id, after.occurrence_date, after.idempotency_key) == (
        before.id,
        before.occurrence_date,
        before.idempotency_key,
    )
    assert after.target_timestamp_utc == datetime(2027, 5, 5, 5, 0, tzinfo=UTC)
    assert after.version == before.version + 1
    assert response.json()["next_event"]["target_timestamp_utc"] == "2027-05-05T05:00:00Z"

    # and null goes back to the default
    response = api_client.patch(detail_url(user.id), {"send_time": None}, format="json")
    assert response.json()["send_time"] is None
    assert pending(user.id).target_timestamp_local == "2027-05-05T09:00:00+05:30"


@freeze_time("2027-01-10T12:00:00Z")
def test_a_new_send_time_moves_both_the_birthday_and_the_anniversary():
    user = user_create(
        first_name="Ada",
        last_name="L",
        date_of_birth=date(1990, 5, 5),
        timezone="Europe/London",
        anniversary_date=date(2015, 6, 20),
    )

    user_update(user=user, data={"send_time": "18:15"})

    locals_ = sorted(
        Event.objects.filter(user=user, status=EventStatus.PENDING).values_list(
            "target_timestamp_local", flat=True
        )
    )
    assert locals_ == ["2027-05-05T18:15:00+01:00", "2027-06-20T18:15:00+01:00"]


@freeze_time("2027-05-05T03:00:00Z")
def test_a_send_time_change_leaves_an_event_being_sent_alone():
    # 09:00 in Kolkata is 03:30Z: the 2027 birthday is pending, then claimed.
    user = user_create(
        first_name="Ada", last_name="L", date_of_birth=date(1990, 5, 5), timezone="Asia/Kolkata"
    )
    claimed = pending(user.id)
    events_transition(
        events=[claimed], source=EventStatus.PENDING, target=EventStatus.PROCESSING, actor=Actor.SCHEDULER
    )
    claimed_before = Event.objects.values().get(id=claimed.id)

    user_update(user=user, data={"send_time": "10:30"})

    assert Event.objects.values().get(id=claimed.id) == claimed_before
    # the next birthday follows the new time
    assert pending(user.id).target_timestamp_local == "2028-05-05T10:30:00+05:30"


@freeze_time("2027-01-10T12:00:00Z")
def test_a_send_time_inside_a_dst_gap_moves_forward_and_one_in_an_overlap_takes_the_first():
    # 2027-03-14 02:30 does not exist in New York; 2027-11-07 01:30 happens twice.
    spring = user_create(
        first_name="A",
        last_name="B",
        date_of_birth=date(1990, 3, 14),
        timezone="America/New_York",
        send_time="02:30",
    )
    autumn = user_create(
        first_name="C",
        last_name="D",
        date_of_birth=date(1990, 11, 7),
        timezone="America/New_York",
        send_time="01:30",
    )

    assert pending(spring.id).target_timestamp_local == "2027-03-14T03:30:00-04:00"
    assert pending(autumn.id).target_timestamp_local == "2027-11-07T01:30:00-04:00"
    assert pending(autumn.id).target_timestamp_utc == datetime(2027, 11, 7, 5, 30, tzinfo=UTC)


@freeze_time("2027-01-10T12:00:00Z")
def test_the_database_refuses_a_send_time_that_is_not_whole_minutes():
    from django.db import IntegrityError, transaction

    user = UserFactory()
    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.filter(pk=user.pk).update(send_time=time(9, 0, 0, 500000))


# --- the import ----------------------------------------------------------------------------


def run_import(tmp_path, text: str):
    path = tmp_path / "users.csv"
    path.write_text(text, encoding="utf-8")
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("import_users", str(path), stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


@freeze_time("2027-01-10T12:00:00Z")
def test_the_import_takes_a_send_time_column_and_an_empty_cell_is_the_default(tmp_path):
    run_import(
        tmp_path,
        "external_id,first_name,last_name,date_of_birth,timezone,send_time\n"
        "k1,Ada,Lovelace,1990-05-05,Asia/Kolkata,10:30\n"
        "k2,Alan,Turing,1990-05-05,Asia/Kolkata,\n",
    )

    ada, alan = User.objects.get(external_id="k1"), User.objects.get(external_id="k2")
    assert (ada.send_time, alan.send_time) == (time(10, 30), None)
    assert pending(ada.id).target_timestamp_utc == datetime(2027, 5, 5, 5, 0, tzinfo=UTC)
    assert pending(alan.id).target_timestamp_local == "2027-05-05T09:00:00+05:30"


@freeze_time("2027-01-10T12:00:00Z")
def test_an_import_update_of_the_send_time_moves_the_pending_event_and_keeps_its_key(tmp_path):
    header = "external_id,first_name,last_name,date_of_birth,timezone,send_time\n"
    run_import(tmp_path, header + "k1,Ada,Lovelace,1990-05-05,Asia/Kolkata,\n")
    before = pending(User.objects.get(external_id="k1").id)

    stdout, _ = run_import(tmp_path, header + "k1,Ada,Lovelace,1990-05-05,Asia/Kolkata,10:30\n")

    assert "1 updated" in stdout
    after = pending(before.user_id)
    assert (after.id, after.idempotency_key) == (before.id, before.idempotency_key)
    assert after.target_timestamp_utc == datetime(2027, 5, 5, 5, 0, tzinfo=UTC)


@pytest.mark.parametrize("bad", ["25:00", "9am", "09:00:00.5"])
def test_an_import_row_with_a_bad_send_time_is_named_and_nothing_is_imported(tmp_path, bad):
    path = tmp_path / "users.csv"
    path.write_text(
        "first_name,last_name,date_of_birth,timezone,send_time\n"
        "Ada,Lovelace,1990-05-05,Asia/Kolkata,10:30\n"
        f"Alan,Turing,1990-05-05,Asia/Kolkata,{bad}\n",
        encoding="utf-8",
    )
    stderr = io.StringIO()

    with pytest.raises(CommandError):
        call_command("import_users", str(path), stdout=io.StringIO(), stderr=stderr)

    assert "line 3: send_time:" in stderr.getvalue()
    assert not User.objects.exists()


def test_the_openapi_description_gives_the_send_times_pattern(anonymous_client):
    schemas = anonymous_client.get("/api/v1/schema/", {"format": "json"}).json()["components"]["schemas"]

    field = schemas["UserRequest"]["properties"]["send_time"]
    assert (field["type"], field["pattern"], field["nullable"]) == (
        "string",
        "^([01][0-9]|2[0-3]):[0-5][0-9]$",
        True,
    )
    assert "send_time" not in schemas["UserRequest"]["required"]
    assert "send_time" in schemas["User"]["required"]
