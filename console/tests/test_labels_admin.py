"""Labels in the console: the one rule every door keeps, and the list's bulk action to add or remove one."""

from __future__ import annotations

import logging

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse

from console.tests.test_destinations_admin import ADD as DESTINATION_ADD
from console.tests.test_destinations_admin import FORM as DESTINATION_FORM
from console.tests.test_recipients_admin import CHANGELIST, form_data
from delivery.models import Destination
from users.models import User
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def shown(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_a_label_typed_with_a_space_is_refused_not_split_into_two(console):
    response = console.post(reverse("admin:users_user_add"), form_data(labels="team platform"))

    errors = response.context["adminform"].form.errors
    assert list(errors) == ["labels"]
    assert "'team platform' holds a space: separate labels with commas" in errors["labels"][0]
    assert not User.objects.exists()


def test_labels_typed_with_commas_or_semicolons_are_taken_as_the_import_takes_them(console):
    console.post(reverse("admin:users_user_add"), form_data(labels="Team:Platform, remote;office:berlin"))

    assert User.objects.get().labels == ["office:berlin", "remote", "team:platform"]


def test_a_destinations_audience_typed_with_a_space_is_refused_on_its_field(console):
    response = console.post(DESTINATION_ADD, {**DESTINATION_FORM, "audience_labels": "team platform"})

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "audience_labels" in errors and "holds a space" in errors["audience_labels"][0]
    assert not Destination.objects.exists()


def test_a_digest_time_off_the_rule_gets_the_send_times_precise_message_on_its_field(console):
    response = console.post(
        DESTINATION_ADD, {**DESTINATION_FORM, "digest_time": "9.30", "digest_timezone": "Europe/Berlin"}
    )

    errors = response.context["adminform"].form.errors
    assert errors["digest_time"] == [
        "Digest time must be a local time HH:MM from 00:00 to 23:59, such as 09:30, or empty for one message "
        "per greeting."
    ]
    assert not Destination.objects.exists()


def test_saving_a_recipient_without_a_send_time_logs_no_database_error(console, caplog):
    caplog.set_level(logging.WARNING)
    user = UserFactory(send_time=None)

    response = console.post(
        reverse("admin:users_user_change", args=[user.pk]), form_data(user, first_name="Ada")
    )

    assert response.status_code == 302
    assert not [r for r in caplog.records if "database error" in r.getMessage()]
    user.refresh_from_db()
    assert user.first_name == "Ada"


def select(users, action: str, label: str, **extra) -> dict:
    return {"action": action, "_selected_action": [str(u.pk) for u in users], "label": label, **extra}


def test_adding_a_label_says_to_how_many_first_and_changes_nobody_until_confirmed(console):
    ada, grace = UserFactory(labels=[]), UserFactory(labels=["team:platform"])
    alan = UserFactory(labels=["remote"])

    page = console.post(reverse(CHANGELIST), select([ada, grace, alan], "add_label", "Team:Platform"))

    text = page.content.decode()
    assert page.status_code == 200
    assert "<strong>2 recipients</strong> will be affected" in text
    assert f"{grace}: already holds it" in text
    assert 'name="label" value="team:platform"' in text
    assert [u.labels for u in (ada, grace, alan)] == [
        User.objects.get(pk=u.pk).labels for u in (ada, grace, alan)
    ]

    done = console.post(
        reverse(CHANGELIST), select([ada, grace, alan], "add_label", "team:platform", confirmed="yes")
    )

    assert done.status_code == 302
    assert shown(done) == ["Added the label team:platform to 2 recipient(s); the others already had it."]
    assert User.objects.get(pk=ada.pk).labels == ["team:platform"]
    assert User.objects.get(pk=alan.pk).labels == ["remote", "team:platform"]
    assert User.objects.get(pk=grace.pk).version == grace.version  # not written
    assert LogEntry.objects.filter(change_message="Added label team:platform").count() == 2


def test_removing_a_label_takes_it_from_those_who_hold_it_only(console):
    ada, grace = UserFactory(labels=["remote", "team:platform"]), UserFactory(labels=["remote"])

    page = console.post(reverse(CHANGELIST), select([ada, grace], "remove_label", "team:platform"))
    assert "<strong>1 recipient</strong> will be affected" in page.content.decode()
    assert f"{grace}: does not hold it" in page.content.decode()

    done = console.post(
        reverse(CHANGELIST), select([ada, grace], "remove_label", "team:platform", confirmed="yes")
    )

    assert shown(done) == ["Removed the label team:platform from 1 recipient(s); the others did not have it."]
    assert User.objects.get(pk=ada.pk).labels == ["remote"]


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("", "Type one label in the box beside the action"),
        ("team, remote", "Type one label in the box beside the action"),
        ("team platform", "holds a space"),
        ("team/platform", "is not a label"),
    ],
)
def test_a_label_action_without_one_good_label_says_why_and_changes_nothing(console, typed, said):
    ada = UserFactory(labels=[])

    response = console.post(reverse(CHANGELIST), select([ada], "add_label", typed, confirmed="yes"))

    assert response.status_code == 302
    [message] = shown(response)
    assert said in message and message.endswith("Nothing was changed.")
    assert User.objects.get(pk=ada.pk).labels == []
