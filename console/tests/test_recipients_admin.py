"""The operator console's recipient pages (Django test client)."""

from __future__ import annotations

from datetime import date, time, timedelta

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.urls import reverse
from django.utils import timezone
from freezegun import freeze_time

from console.tests.console_data import completed_event, failed_event
from scheduling.models import Event, EventStatus
from users.models import User
from users.tests.factories import UserFactory

CHANGELIST = "admin:users_user_changelist"

pytestmark = pytest.mark.django_db


def changelist(console, **params):
    response = console.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def listed(response) -> set:
    return {user.pk for user in response.context["cl"].result_list}


def form_data(user: User | None = None, **fields) -> dict:
    """What the add or change form posts (with the events inline's management form)."""
    data = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-03-14",
        "timezone": "Asia/Kathmandu",
    }
    data.update(fields)
    if user is not None:
        count = user.events.count()
        data.update(
            {
                "events-TOTAL_FORMS": count,
                "events-INITIAL_FORMS": count,
                "events-MIN_NUM_FORMS": 0,
                "events-MAX_NUM_FORMS": 1000,
            }
        )
    return data


EVENT_SCHEDULE = [
    "occurrence_date",
    "target_timestamp_utc",
    "target_timestamp_local",
    "target_timezone",
    "status",
]


# --- the list ---------------------------------------------------------------------------------


def test_list_shows_zone_birth_date_and_the_next_birthday_in_local_and_utc_time(console):
    user = UserFactory(first_name="Ada", last_name="Lovelace", timezone="Asia/Kathmandu")
    event = user.events.get(status=EventStatus.PENDING)

    response = changelist(console)

    html = response.content.decode()
    assert "Ada" in html and "Lovelace" in html and "Asia/Kathmandu" in html
    assert event.target_timestamp_local[:16].replace("T", " ") in html
    assert "+05:45" in html
    assert event.target_timestamp_utc.strftime("%Y-%m-%d %H:%M") in html
    assert 'class="bs-badge"' in html and "Pending" in html


def test_list_shows_the_wedding_date_and_the_next_birthday_even_when_the_anniversary_comes_first(console):
    user = UserFactory(anniversary_date=date(2015, 6, 20))
    birthday = user.events.get(event_type="BIRTHDAY")
    sooner = timezone.now() + timedelta(hours=1)
    user.events.filter(event_type="ANNIVERSARY").update(target_timestamp_utc=sooner)

    html = changelist(console).content.decode()

    assert "2015-06-20" in html
    assert birthday.target_timestamp_utc.strftime("%Y-%m-%d %H:%M") in html
    assert sooner.strftime("%Y-%m-%d %H:%M") not in html


def test_list_flags_an_overdue_next_birthday(console):
    user = UserFactory()
    Event.objects.filter(user=user).update(target_timestamp_utc=timezone.now() - timedelta(hours=1))

    assert "Pending, overdue" in changelist(console).content.decode()


def test_list_reads_the_pending_events_in_one_query_whatever_the_page_size(
    console, django_assert_max_num_queries
):
    for _ in range(2):
        UserFactory()
    changelist(console)
    with django_assert_max_num_queries(12) as baseline:
        changelist(console)
    for _ in range(25):
        completed_event(UserFactory())
    with django_assert_max_num_queries(len(baseline.captured_queries)):
        changelist(console)


@pytest.mark.parametrize("term", ["Lovelace", "ada", "Ada Lovelace"])
def test_search_by_name(console, term):
    ada = UserFactory(first_name="Ada", last_name="Lovelace")
    UserFactory(first_name="Alan", last_name="Turing")

    assert listed(changelist(console, q=term)) == {ada.pk}


def test_search_by_id(console):
    ada = UserFactory()
    UserFactory()

    assert listed(changelist(console, q=str(ada.pk))) == {ada.pk}


def test_list_shows_the_external_id_and_finds_a_recipient_by_it_whole(console):
    crm = UserFactory(external_id="crm-1042")
    UserFactory(external_id="crm-10420")
    UserFactory()

    assert "crm-1042" in changelist(console).content.decode()
    assert listed(changelist(console, q="crm-1042")) == {crm.pk}
    assert listed(changelist(console, q="crm-104")) == set()
    # Exactly, case included: the unique index on it finds it, and it is the client's id, not text.
    assert listed(changelist(console, q="CRM-1042")) == set()


@pytest.mark.parametrize(
    ("term", "found"), [("al", {"Alan"}), ("A", {"Alan", "Ada"}), ("sal", {"Sal", "Ursala"})]
)
def test_a_search_word_too_short_for_a_trigram_matches_the_start_of_a_name(console, term, found):
    for first_name in ("Alan", "Ada", "Sal", "Ursala"):
        UserFactory(first_name=first_name, last_name="Smith")

    assert {user.first_name for user in changelist(console, q=term).context["cl"].result_list} == found


def test_filter_by_time_zone(console):
    tokyo = UserFactory(timezone="Asia/Tokyo")
    UserFactory(timezone="Europe/Paris")

    response = changelist(console, timezone="Asia/Tokyo")

    assert listed(response) == {tokyo.pk}
    assert "Europe/Paris" in response.content.decode()  # offered as a choice


def test_change_page_shows_the_recipients_events_read_only(console):
    user = UserFactory()
    old = failed_event(user)

    response = console.get(reverse("admin:users_user_change", args=[user.pk]))

    html = response.content.decode()
    assert response.status_code == 200
    assert str(old.occurrence_date) in html or old.occurrence_date.strftime("%b. %-d, %Y") in html
    assert "Failed" in html and "Pending" in html
    inline = response.context["inline_admin_formsets"][0]
    assert (
        not inline.has_add_permission
        and not inline.has_change_permission
        and not inline.has_delete_permission
    )


# --- add and edit, through users.services ----------------------------------------------------------


def test_adding_a_recipient_schedules_the_event_exactly_as_the_api_does(console, api_client):
    response = console.post(reverse("admin:users_user_add"), form_data(first_name="  Ada  "))

    assert response.status_code == 302
    by_console = User.objects.get()
    assert by_console.first_name == "Ada"  # trimmed by the shared rules
    api = api_client.post(
        "/api/v1/users/",
        {
            "first_name": "Ada",
            "last_name": "Lovelace",
            "date_of_birth": "1990-03-14",
            "timezone": "Asia/Kathmandu",
        },
        format="json",
    )
    assert api.status_code == 201
    by_api = User.objects.get(pk=api.json()["id"])
    console_event = Event.objects.values(*EVENT_SCHEDULE).get(user=by_console)
    api_event = Event.objects.values(*EVENT_SCHEDULE).get(user=by_api)
    assert console_event == api_event
    assert console_event["status"] == EventStatus.PENDING
    entry = LogEntry.objects.get(object_id=str(by_console.pk))
    assert entry.action_flag == ADDITION and entry.user.username == "ops-alice"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("timezone", "+05:45", "is a UTC offset, not a time zone"),
        ("timezone", "Mars/Olympus_Mons", "is not a known IANA time zone"),
        ("date_of_birth", "1899-12-31", "must not be before 1900-01-01"),
        ("date_of_birth", (date.today() + timedelta(days=3)).isoformat(), "is in the future"),
    ],
)
def test_invalid_recipient_shows_the_shared_rules_message_on_the_field_and_saves_nothing(
    console, field, value, message
):
    response = console.post(reverse("admin:users_user_add"), form_data(**{field: value}))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field]
    assert len(errors[field]) == 1 and message in errors[field][0]
    assert message in response.content.decode()
    assert not User.objects.exists() and not Event.objects.exists()


def test_a_blank_name_is_refused_on_its_field(console):
    response = console.post(reverse("admin:users_user_add"), form_data(last_name="   "))

    assert list(response.context["adminform"].form.errors) == ["last_name"]
    assert not User.objects.exists()


def test_an_external_id_another_recipient_holds_is_refused_on_its_field(console):
    UserFactory(external_id="crm-1042")

    response = console.post(reverse("admin:users_user_add"), form_data(external_id=" crm-1042 "))

    assert response.status_code == 200
    assert list(response.context["adminform"].form.errors) == ["external_id"]
    assert User.objects.count() == 1


def test_adding_with_an_external_id_stores_it_trimmed_and_a_blank_one_as_none(console):
    console.post(reverse("admin:users_user_add"), form_data(external_id=" crm-1 "))
    console.post(reverse("admin:users_user_add"), form_data(external_id="  "))

    assert set(User.objects.values_list("external_id", flat=True)) == {"crm-1", None}


def test_editing_the_zone_moves_the_pending_event_and_keeps_its_key(console):
    user = UserFactory(timezone="America/New_York")
    before = user.events.get(status=EventStatus.PENDING)

    response = console.post(
        reverse("admin:users_user_change", args=[user.pk]),
        form_data(
            user,
            first_name=user.first_name,
            last_name=user.last_name,
            date_of_birth=user.date_of_birth.isoformat(),
            timezone="Europe/London",
        ),
    )

    assert response.status_code == 302
    after = user.events.get(status=EventStatus.PENDING)
    assert after.pk == before.pk and after.idempotency_key == before.idempotency_key
    assert after.target_timezone == "Europe/London"
    assert after.target_timestamp_utc != before.target_timestamp_utc


def test_an_invalid_edit_shows_errors_and_changes_nothing(console):
    user = UserFactory(timezone="America/New_York")

    response = console.post(
        reverse("admin:users_user_change", args=[user.pk]),
        form_data(user, timezone="UTC+3"),
    )

    assert response.status_code == 200
    assert "is a UTC offset" in response.content.decode()
    user.refresh_from_db()
    assert user.timezone == "America/New_York"
    assert user.events.get(status=EventStatus.PENDING).target_timezone == "America/New_York"


def test_adding_with_a_send_time_schedules_at_it_and_the_change_form_shows_it_as_typed(console):
    response = console.post(
        reverse("admin:users_user_add"), form_data(send_time="10:30", timezone="Asia/Kolkata")
    )

    assert response.status_code == 302
    user = User.objects.get()
    assert user.send_time == time(10, 30)
    assert user.events.get().target_timestamp_local.endswith("T10:30:00+05:30")
    page = console.get(reverse("admin:users_user_change", args=[user.pk]))
    assert 'name="send_time" value="10:30"' in page.content.decode()


@pytest.mark.parametrize("value", ["25:00", "9am", "09:00:00.5", "9:30"])
def test_a_bad_send_time_is_refused_on_its_field_with_the_apis_message(console, value):
    response = console.post(reverse("admin:users_user_add"), form_data(send_time=value))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["send_time"] and "HH:MM" in errors["send_time"][0]
    assert not User.objects.exists()


# Before the login's session expires: the console fixture logs in at the real time.
@freeze_time("2026-01-10T12:00:00Z")
def test_editing_the_send_time_moves_the_pending_event_and_keeps_its_key_and_clearing_it_restores_the_default(
    console,
):
    user = UserFactory(timezone="Asia/Kolkata", send_time=time(10, 30), date_of_birth=date(1990, 5, 5))
    before = user.events.get(status=EventStatus.PENDING)
    fields = {
        "first_name": user.first_name,
        "last_name": user.last_name,
        "date_of_birth": user.date_of_birth.isoformat(),
        "timezone": "Asia/Kolkata",
    }

    console.post(
        reverse("admin:users_user_change", args=[user.pk]), form_data(user, **fields, send_time="07:45")
    )
    moved = user.events.get(status=EventStatus.PENDING)
    console.post(reverse("admin:users_user_change", args=[user.pk]), form_data(user, **fields, send_time=""))
    cleared = user.events.get(status=EventStatus.PENDING)

    assert moved.pk == cleared.pk == before.pk
    assert moved.idempotency_key == before.idempotency_key
    assert moved.target_timestamp_local.endswith("T07:45:00+05:30")
    assert cleared.target_timestamp_local.endswith("T09:00:00+05:30")
    user.refresh_from_db()
    assert user.send_time is None


def test_deleting_a_recipient_removes_their_events(console):
    user = UserFactory()
    completed_event(user)

    response = console.post(reverse("admin:users_user_delete", args=[user.pk]), {"post": "yes"})

    assert response.status_code == 302
    assert not User.objects.exists() and not Event.objects.exists()


# --- erasure: what the confirmation says is what the erase does --------------------------------


def erasure_page_parts(html: str) -> tuple[str, str, str]:
    """The page's summary and object list (what it says is deleted) and its "kept" section."""
    summary = html[html.index("<h2>Summary</h2>") : html.index("<h2>Kept, naming no one</h2>")]
    kept = html[html.index('<ul id="erasure-kept">') : html.index("<h2>Objects</h2>")]
    objects = html[html.index("<h2>Objects</h2>") : html.index("<form", html.index("<h2>Objects</h2>"))]
    return summary, objects, kept


def a_recipient_with_history(**fields) -> User:
    user = UserFactory(**fields)
    completed_event(user)  # one delivery, one attempt
    failed_event(user, years_ago=2)  # one delivery, three attempts
    return user


@pytest.mark.parametrize("external_id", [None, "crm-9"])
def test_the_delete_confirmation_lists_as_deleted_only_what_the_erase_deletes_and_says_what_it_keeps(
    console, external_id
):
    from delivery.models import Delivery, DeliveryAttempt

    user = a_recipient_with_history(external_id=external_id)

    page = console.get(reverse("admin:users_user_delete", args=[user.pk]))

    assert page.status_code == 200
    summary, objects, kept = erasure_page_parts(page.content.decode())
    assert "Are you sure you want to erase the recipient" in page.content.decode()
    assert all(line in summary for line in ("Recipients: 1", "Events: 3", "Deliveries: 2"))
    assert "attempt" not in summary.lower() and "attempt" not in objects.lower()
    assert "Delivery attempts: 4." in kept and "HTTP status" in kept and "error text" in kept
    assert ("keyed digest" in kept) is (external_id is not None)

    # and the erase then does what the page said
    assert (
        console.post(reverse("admin:users_user_delete", args=[user.pk]), {"post": "yes"}).status_code == 302
    )
    assert not User.objects.exists() and not Event.objects.exists() and not Delivery.objects.exists()
    assert set(DeliveryAttempt.objects.values_list("delivery_id", "error", "response_excerpt")) == {
        (None, "", "")
    }
    assert DeliveryAttempt.objects.count() == 4


def test_the_lists_delete_action_confirms_with_the_same_account_of_what_goes_and_what_stays(console):
    from delivery.models import DeliveryAttempt

    users = [a_recipient_with_history(), a_recipient_with_history(external_id="crm-7")]
    selected = {"action": "delete_selected", "_selected_action": [str(user.pk) for user in users]}

    page = console.post(reverse(CHANGELIST), selected)

    assert page.status_code == 200
    summary, objects, kept = erasure_page_parts(page.content.decode())
    assert "Are you sure you want to erase the selected recipients?" in page.content.decode()
    assert all(line in summary for line in ("Recipients: 2", "Events: 6", "Deliveries: 4"))
    assert "attempt" not in summary.lower() and "attempt" not in objects.lower()
    assert "Delivery attempts: 8." in kept and "keyed digest" in kept

    assert console.post(reverse(CHANGELIST), {**selected, "post": "yes"}).status_code == 302
    assert not User.objects.exists() and DeliveryAttempt.objects.filter(delivery__isnull=True).count() == 8
