"""The person's say through the API, the import and the services: visibility, hide_age, a birthday without a year.

Bad input names its field and stores nothing; each change is recorded with who and when;
the export carries the choices and their record, and the erasure takes them.
"""

import io
from datetime import date

import pytest
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from freezegun import freeze_time

from delivery.destinations.services import destination_url_fields
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, Destination
from scheduling.celebration import NOT_CELEBRATED, YEARLESS_YEAR, ChangedBy, Visibility
from scheduling.models import CelebrationDefault, Event, EventStatus, EventType, MessageTemplate
from scheduling.selectors import message_templates
from scheduling.services.celebration import celebration_default_set
from users.models import CelebrationChange, CelebrationChoice, User
from users.selectors import recipient_messages
from users.services import user_create, user_erase, user_update

pytestmark = pytest.mark.django_db
USERS_URL = "/api/v1/users/"


def _payload(**overrides) -> dict:
    return {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-05-05",
        "timezone": "Europe/Berlin",
        **overrides,
    }


def _stored() -> tuple[int, int, int, int]:
    return (
        User.objects.count(),
        Event.objects.count(),
        CelebrationChoice.objects.count(),
        CelebrationChange.objects.count(),
    )


# --- bad input: 400 naming the field, nothing stored ------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("date_of_birth", "--02-30"),
        ("date_of_birth", "--13-01"),
        ("date_of_birth", "--6-15"),
        ("visibility", {"BIRTHDAY": "maybe"}),
        ("visibility", {"WEDDING": "public"}),
        ("visibility", "public"),
        ("hide_age", "yes"),
    ],
)
def test_a_bad_new_field_through_the_api_is_a_400_naming_it_and_nothing_is_stored(api_client, field, value):
    response = api_client.post(USERS_URL, _payload(**{field: value}), format="json")

    assert response.status_code == 400, response.content
    assert set(response.json()) == {field}
    assert _stored() == (0, 0, 0, 0)


def test_a_bad_visibility_in_a_patch_is_a_400_naming_it_and_changes_nothing(api_client):
    user = user_create(first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 5, 5), timezone="UTC")
    before = _stored()

    response = api_client.patch(
        f"{USERS_URL}{user.id}/", {"visibility": {"BIRTHDAY": "maybe"}}, format="json"
    )

    assert response.status_code == 400
    assert list(response.json()) == ["visibility"]
    assert "maybe" in response.json()["visibility"][0]
    assert _stored() == before
    assert User.objects.get().version == user.version


def _import(tmp_path, text: str) -> tuple[str, str]:
    path = tmp_path / "people.csv"
    path.write_text(text, encoding="utf-8")
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("import_users", str(path), stdout=stdout, stderr=stderr)
    return str(excinfo.value), stderr.getvalue()


@pytest.mark.parametrize(
    ("column", "cell", "named"),
    [
        ("date_of_birth", "--02-30", "date_of_birth: Date of birth --02-30 is not a day of the year."),
        ("visibility", "BIRTHDAY:maybe", "visibility: BIRTHDAY: 'maybe' is not one of public, private, none"),
        ("visibility", "private", "visibility: 'private' is not TYPE:visibility"),
        ("hide_age", "perhaps", "hide_age: Must be true or false."),
    ],
)
def test_a_bad_new_cell_through_the_import_names_its_field_and_nothing_is_imported(
    tmp_path, column, cell, named
):
    columns = ["first_name", "last_name", "date_of_birth", "timezone", column]
    good = {"first_name": "Grace", "last_name": "Hopper", "date_of_birth": "1980-01-01", "timezone": "UTC"}
    rows = [
        {**good, column: "" if column != "date_of_birth" else "1980-01-01"},
        {**good, "first_name": "Bad", column: cell},
    ]
    text = ",".join(dict.fromkeys(columns)) + "\n"
    text += "".join(",".join(row[c] for c in dict.fromkeys(columns)) + "\n" for row in rows)

    error, stderr = _import(tmp_path, text)

    assert "nothing was imported" in error
    assert f"line 3: {named}" in stderr
    assert _stored() == (0, 0, 0, 0)


# --- a birthday without a year, and an age not said -----------------------------------


@freeze_time("2027-06-01T12:00:00Z")
def test_a_birthday_without_a_year_is_stored_in_the_yearless_year_and_shown_as_month_and_day(api_client):
    response = api_client.post(USERS_URL, _payload(date_of_birth="--06-15"), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["date_of_birth"] == "--06-15"
    user = User.objects.get()
    assert user.date_of_birth == date(YEARLESS_YEAR, 6, 15)
    assert Event.objects.get(user=user).occurrence_date == date(2027, 6, 15)


@freeze_time("2027-01-10T12:00:00Z")
def test_a_feb_29_without_a_year_is_celebrated_on_feb_28_in_a_common_year(tmp_path):
    path = tmp_path / "people.csv"
    path.write_text("first_name,last_name,date_of_birth,timezone\nLeap,Day,--02-29,UTC\n", encoding="utf-8")

    call_command("import_users", str(path), stdout=io.StringIO(), stderr=io.StringIO())

    user = User.objects.get()
    assert user.date_of_birth == date(YEARLESS_YEAR, 2, 29)
    assert Event.objects.get(user=user).occurrence_date == date(2027, 2, 28)


def _texts(user: User) -> list[str]:
    return [row.text for row in recipient_messages(user=user) if row.event_type == EventType.BIRTHDAY]


@freeze_time("2027-01-10T12:00:00Z")
def test_a_text_with_the_age_falls_back_to_one_without_for_a_hidden_age_or_a_missing_year_and_never_a_milestone():
    # given a default that says the age, a German text that does too, and a milestone text for 40
    MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY, language="").update(
        body="{first_name} turns {age}!"
    )
    MessageTemplate.objects.create(
        event_type=EventType.BIRTHDAY, language="de", body="{first_name} wird {age}!"
    )
    MessageTemplate.objects.create(event_type=EventType.BIRTHDAY, milestone=40, body="Forty, {first_name}!")
    said = user_create(first_name="Said", last_name="Age", date_of_birth=date(1987, 5, 5), timezone="UTC")
    hidden = user_create(
        first_name="Hidden",
        last_name="Age",
        date_of_birth=date(1987, 5, 5),
        timezone="UTC",
        hide_age=True,
        changed_by=ChangedBy.API_CLIENT,
        by="hr",
    )
    yearless = user_create(
        first_name="No",
        last_name="Year",
        date_of_birth=date(YEARLESS_YEAR, 5, 5),
        timezone="UTC",
        language="de",
    )

    # then the one whose age is said gets the milestone; the others the built-in text, with a note
    assert _texts(said) == ["Forty, Said!"]
    assert _texts(hidden) == ["Hey, Hidden Age it's your birthday"]
    assert _texts(yearless) == ["Hey, No Year it's your birthday"]
    assert "chose never" in recipient_messages(user=hidden)[0].note
    assert "no year" in recipient_messages(user=yearless)[0].note
    assert recipient_messages(user=said)[0].note == ""
    # and a text without the age in their language is chosen before the built-in one
    MessageTemplate.objects.create(
        event_type=EventType.BIRTHDAY, language="de-AT", body="Servus {first_name}!"
    )
    templates = message_templates()
    assert templates.chosen(event_type=EventType.BIRTHDAY, language="de-AT", without=frozenset({"age"}))[
        0
    ] == ("Servus {first_name}!")


# --- visibility at the claim, and its record --------------------------------------------


def test_the_claim_fails_a_not_celebrated_persons_occurrence_and_a_private_one_reaches_only_personal_destinations(
    settings,
):
    settings.WEBHOOK_URL = ""
    channel = Destination.objects.create(
        name="channel", **destination_url_fields(url="https://chat.example/channel")
    )
    inbox = Destination.objects.create(
        name="inbox", **destination_url_fields(url="https://mail.example/inbox"), personal=True
    )
    people = {
        visibility: user_create(
            first_name=visibility.title(),
            last_name="Person",
            date_of_birth=date(1990, 5, 5),
            timezone="UTC",
            visibility={EventType.BIRTHDAY: visibility},
            changed_by=ChangedBy.API_CLIENT,
            by="client",
        )
        for visibility in Visibility.values
    }
    Event.objects.update(target_timestamp_utc=Event.objects.first().created_at)

    deliveries_enqueue_due()

    reached = {
        (d.event.user.first_name, d.destination_id) for d in Delivery.objects.select_related("event__user")
    }
    assert reached == {("Public", channel.pk), ("Public", inbox.pk), ("Private", inbox.pk)}
    none = Event.objects.get(user=people[Visibility.NONE], status=EventStatus.FAILED)
    assert none.failure_reason == NOT_CELEBRATED


def test_a_company_default_of_none_holds_back_those_without_a_choice_and_a_person_may_opt_in():
    celebration_default_set(event_type=EventType.BIRTHDAY, visibility=Visibility.NONE, by="hr-admin")
    default = user_create(
        first_name="By", last_name="Default", date_of_birth=date(1990, 5, 5), timezone="UTC"
    )
    opted_in = user_create(first_name="Opted", last_name="In", date_of_birth=date(1990, 5, 5), timezone="UTC")
    user_update(
        user=opted_in, data={"visibility": {"BIRTHDAY": "public"}}, changed_by=ChangedBy.PERSON, by="ignored"
    )
    Event.objects.update(target_timestamp_utc=Event.objects.first().created_at)

    deliveries_enqueue_due()

    assert Event.objects.get(user=default, status=EventStatus.FAILED).failure_reason == NOT_CELEBRATED
    assert not Event.objects.filter(user=opted_in, status=EventStatus.FAILED).exists()
    assert CelebrationDefault.objects.get().updated_by == "hr-admin"
    # the person's own change is recorded as theirs, naming no account
    change = CelebrationChange.objects.get(user=opted_in)
    assert (change.changed_by, change.actor, change.old_value, change.new_value) == (
        ChangedBy.PERSON,
        "",
        "",
        "public",
    )


def test_a_change_of_choices_without_saying_who_is_refused_and_nothing_is_stored():
    user = user_create(first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 5, 5), timezone="UTC")

    with pytest.raises(ValueError, match="who makes it"):
        user_update(user=user, data={"hide_age": True})

    assert not User.objects.get().hide_age
    assert not CelebrationChange.objects.exists()


def test_each_change_is_recorded_with_who_when_and_from_what_to_what_and_the_export_carries_it(
    api_client, operator
):
    operator.user_permissions.add(*Permission.objects.filter(codename="view_delivery"))
    created = api_client.post(
        USERS_URL, _payload(visibility={"BIRTHDAY": "private"}, hide_age=True), format="json"
    ).json()
    api_client.patch(f"{USERS_URL}{created['id']}/", {"visibility": {"BIRTHDAY": None}}, format="json")

    response = api_client.get(f"{USERS_URL}{created['id']}/export/")
    assert response.status_code == 200, response.content
    export = response.json()

    assert created["visibility"] == {"BIRTHDAY": "private", "ANNIVERSARY": None}
    assert created["visibility_in_force"] == {"BIRTHDAY": "private", "ANNIVERSARY": "public"}
    assert export["celebration_choices"] == []
    changes = [
        (c["changed_by"], c["actor"], c["field"], c["event_type"], c["old_value"], c["new_value"])
        for c in export["celebration_changes"]
    ]
    assert changes == [
        ("api_client", "operator", "visibility", "BIRTHDAY", "", "private"),
        ("api_client", "operator", "hide_age", "", "false", "true"),
        ("api_client", "operator", "visibility", "BIRTHDAY", "private", ""),
    ]
    assert all(c["changed_at"] for c in export["celebration_changes"])
    assert export["recipient"]["hide_age"] is True


def test_the_erasure_takes_the_persons_choices_and_their_record():
    user = user_create(
        first_name="Ada",
        last_name="Lovelace",
        date_of_birth=date(1990, 5, 5),
        timezone="UTC",
        hide_age=True,
        visibility={"BIRTHDAY": "none"},
        changed_by=ChangedBy.OPERATOR,
        by="ops",
    )
    assert _stored()[2:] == (1, 2)

    user_erase(user=user)

    assert _stored() == (0, 0, 0, 0)


def test_hiding_the_age_after_the_claim_renders_the_queued_message_again_without_it(settings):
    settings.WEBHOOK_URL = ""
    Destination.objects.create(name="channel", **destination_url_fields(url="https://chat.example/channel"))
    MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY, language="").update(
        body="{first_name} turns {age}!"
    )
    user = user_create(first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 5, 5), timezone="UTC")
    Event.objects.update(target_timestamp_utc=Event.objects.first().created_at)
    deliveries_enqueue_due()
    queued = Delivery.objects.get()
    assert queued.payload["message"].startswith("Ada turns ")

    user_update(user=user, data={"hide_age": True}, changed_by=ChangedBy.API_CLIENT, by="client")

    queued.refresh_from_db()
    assert queued.payload["message"] == "Hey, Ada Lovelace it's your birthday"
    assert queued.status == "QUEUED"
