"""The operator console's message templates: list, edit form, refusals and permissions."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from django.utils.html import escape

from conftest import permissions_named
from scheduling.handlers import REGISTRY, get_handler
from scheduling.messages import template_errors
from scheduling.models import EventType, MessageTemplate
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

BIRTHDAY = get_handler(EventType.BIRTHDAY)


def birthday_template() -> MessageTemplate:
    return MessageTemplate.objects.get(event_type=EventType.BIRTHDAY)


def change_url() -> str:
    return reverse("admin:scheduling_messagetemplate_change", args=[birthday_template().pk])


def staff_client(client, django_user_model, *permissions: str):
    staff = django_user_model.objects.create_user(
        username="ops-bob", password="unused-Pass-1!", is_staff=True
    )
    staff.user_permissions.set(permissions_named(*permissions))
    client.force_login(staff)
    return client


def test_the_list_shows_every_registered_type_with_its_text(console):
    response = console.get(reverse("admin:scheduling_messagetemplate_changelist"))

    assert response.status_code == 200
    assert {row.event_type for row in response.context["cl"].result_list} == REGISTRY.keys()
    assert escape(BIRTHDAY.message_template) in response.content.decode()


def test_the_form_lists_the_placeholders_and_the_default_and_previews_the_next_message(console):
    UserFactory(first_name="Ada", last_name="Lovelace")

    html = console.get(change_url()).content.decode()

    assert "{age}, {first_name}, {last_name}" in html
    assert escape(BIRTHDAY.message_template) in html
    assert escape("Hey, Ada Lovelace it's your birthday") in html


def test_the_preview_says_so_when_nobody_has_an_event_of_the_type(console):
    html = console.get(change_url()).content.decode()

    assert "no recipient has a pending event of this type" in html


def test_a_saved_template_is_stored_with_the_operator_logged_and_previewed(console):
    UserFactory(first_name="Ada", last_name="Lovelace")

    response = console.post(change_url(), {"body": "Happy birthday, {first_name}!", "_continue": "Save"})

    assert response.status_code == 302
    stored = birthday_template()
    assert (stored.body, stored.updated_by) == ("Happy birthday, {first_name}!", "ops-alice")
    entry = LogEntry.objects.get(object_id=str(stored.pk))
    assert (entry.action_flag, entry.user.username) == (CHANGE, "ops-alice")
    assert "Happy birthday, Ada!" in console.get(change_url()).content.decode()


@pytest.mark.parametrize(
    "body",
    ["Hi {nickname}", "Hi {0}", "Hi {user.first_name}", "Hi {a[0]}", "Age {age:d}", "Hi {first_name", "Hi }"],
)
def test_a_bad_template_is_refused_with_the_error_shown_and_nothing_stored(console, body):
    before = birthday_template()

    response = console.post(change_url(), {"body": body, "_save": "Save"})

    assert response.status_code == 200
    errors = template_errors(template=body, placeholders=BIRTHDAY.placeholders)
    assert errors and response.context["adminform"].form.errors["body"] == errors
    assert escape(errors[0]) in response.content.decode()
    after = birthday_template()
    assert (after.body, after.updated_by, after.updated_at) == (
        before.body,
        before.updated_by,
        before.updated_at,
    )
    assert not LogEntry.objects.exists()


def test_a_blank_template_is_refused(console):
    response = console.post(change_url(), {"body": " \n ", "_save": "Save"})

    assert response.context["adminform"].form.errors["body"] == ["This field is required."]
    assert birthday_template().body == BIRTHDAY.message_template


def test_a_types_default_template_cannot_be_deleted_but_a_language_variant_can_be_added_and_deleted(console):
    # the default row stays
    delete = reverse("admin:scheduling_messagetemplate_delete", args=[birthday_template().pk])
    assert console.get(delete).status_code == 403

    # a German text is added, with the add form, and deleted again
    added = console.post(
        reverse("admin:scheduling_messagetemplate_add"),
        {"event_type": "BIRTHDAY", "language": "DE", "milestone": "", "body": "Alles Gute, {first_name}!"},
    )
    german = MessageTemplate.objects.get(event_type="BIRTHDAY", language="de")
    deleted = console.post(
        reverse("admin:scheduling_messagetemplate_delete", args=[german.pk]), {"post": "yes"}
    )

    assert added.status_code == 302 and german.updated_by
    assert deleted.status_code == 302
    assert not MessageTemplate.objects.filter(language="de").exists()


def test_a_variant_with_an_unknown_placeholder_a_bad_language_or_a_second_of_its_kind_is_refused(console):
    add = reverse("admin:scheduling_messagetemplate_add")
    console.post(add, {"event_type": "BIRTHDAY", "language": "de", "milestone": "", "body": "Alles Gute!"})

    unknown = console.post(
        add, {"event_type": "BIRTHDAY", "language": "fr", "milestone": "", "body": "{years}"}
    )
    bad_tag = console.post(
        add, {"event_type": "BIRTHDAY", "language": "german", "milestone": "", "body": "Hi"}
    )
    again = console.post(
        add, {"event_type": "BIRTHDAY", "language": "de", "milestone": "", "body": "Noch mal"}
    )

    assert "body" in unknown.context["adminform"].form.errors
    assert "language" in bad_tag.context["adminform"].form.errors
    assert again.status_code == 200 and again.context["adminform"].form.errors
    assert list(
        MessageTemplate.objects.filter(language__in=["de", "fr", "german"]).values_list("body", flat=True)
    ) == ["Alles Gute!"]


def test_staff_without_the_permission_cannot_open_the_templates(client, django_user_model):
    staff = staff_client(client, django_user_model)

    assert staff.get(reverse("admin:scheduling_messagetemplate_changelist")).status_code == 403
    assert staff.get(change_url()).status_code == 403


def test_view_permission_shows_the_template_but_refuses_a_change(client, django_user_model):
    staff = staff_client(client, django_user_model, "scheduling.view_messagetemplate")

    response = staff.get(change_url())

    assert response.status_code == 200
    assert list(response.context["adminform"].form.fields) == []
    assert staff.post(change_url(), {"body": "Hi {first_name}", "_save": "Save"}).status_code == 403
    assert birthday_template().body == BIRTHDAY.message_template


def test_change_permission_lets_an_operator_save(client, django_user_model):
    staff = staff_client(
        client, django_user_model, "scheduling.view_messagetemplate", "scheduling.change_messagetemplate"
    )

    assert staff.post(change_url(), {"body": "Hi {first_name}", "_save": "Save"}).status_code == 302
    assert (birthday_template().body, birthday_template().updated_by) == ("Hi {first_name}", "ops-bob")
