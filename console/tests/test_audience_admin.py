"""Labels and audiences in the console: a recipient's labels edited and filtered on, a destination's audience."""

from datetime import date

import pytest
from django.urls import reverse

from console.tests.test_destinations_admin import ADD as DESTINATION_ADD
from console.tests.test_destinations_admin import FORM as DESTINATION_FORM
from console.tests.test_recipients_admin import form_data
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import Destination
from users.models import User
from users.services import user_create

pytestmark = pytest.mark.django_db

RECIPIENTS = reverse("admin:users_user_changelist")


def recipient(first_name: str, labels: list[str]) -> User:
    return user_create(
        first_name=first_name, last_name="Doe", date_of_birth=date(1990, 1, 1), timezone="UTC", labels=labels
    )


def test_an_operator_sets_a_recipients_labels_and_language_on_the_change_form(console):
    user = recipient("Ada", [])
    url = reverse("admin:users_user_change", args=[user.pk])

    response = console.post(url, form_data(user, labels="Team:Platform, office:berlin", language="de"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    user.refresh_from_db()
    assert (user.labels, user.language) == (["office:berlin", "team:platform"], "de")


def test_a_bad_label_is_shown_on_the_field_and_changes_nothing(console):
    user = recipient("Ada", ["team:data"])
    url = reverse("admin:users_user_change", args=[user.pk])

    response = console.post(url, form_data(user, labels="team platform!"))

    assert response.status_code == 200
    assert "labels" in response.context["adminform"].form.errors
    user.refresh_from_db()
    assert user.labels == ["team:data"]


def test_the_recipients_list_shows_labels_and_filters_by_one_typed_or_chosen(console):
    recipient("Ada", ["team:platform"])
    recipient("Bob", ["team:data"])
    destination_create(
        settings=DestinationSettings(
            name="platform", url="https://platform.example.org/hook", audience_labels=["team:platform"]
        ),
        operator="ops",
    )

    everyone = console.get(RECIPIENTS)
    filtered = console.get(RECIPIENTS, {"label": "team:platform"})

    assert "team:data" in everyone.content.decode()
    # The audiences' labels are offered as choices, and the box filters by any label.
    assert "?label=team%3Aplatform" in everyone.content.decode()
    assert [user.first_name for user in filtered.context["cl"].result_list] == ["Ada"]


def test_an_operator_gives_a_destination_an_audience_and_sees_whom_it_greets(console):
    recipient("Ada", ["team:platform"])
    recipient("Bob", ["team:data", "contractor"])

    response = console.post(
        DESTINATION_ADD,
        {**DESTINATION_FORM, "audience_labels": "team:platform, team:data", "excluded_labels": ""},
    )
    destination = Destination.objects.get()
    change = console.get(reverse("admin:delivery_destination_change", args=[destination.pk]))
    listed = console.get(reverse("admin:delivery_destination_changelist"))

    assert response.status_code == 302
    assert destination.audience_labels == ["team:data", "team:platform"]
    assert "2 recipient(s)" in change.content.decode()
    assert "team:data or team:platform" in listed.content.decode()


def test_a_label_both_greeted_and_excluded_is_refused_on_the_form(console):
    response = console.post(
        DESTINATION_ADD,
        {**DESTINATION_FORM, "audience_labels": "team:platform", "excluded_labels": "team:platform"},
    )

    assert response.status_code == 200
    assert "excluded_labels" in response.context["adminform"].form.errors
    assert not Destination.objects.exists()


def test_an_operator_gives_a_destination_its_own_words_and_a_placeholder_its_type_lacks_is_refused(console):
    words = {"message_birthday": "🎂 Happy birthday, {first_name}!", "message_anniversary": ""}
    created = console.post(DESTINATION_ADD, {**DESTINATION_FORM, **words})
    refused = console.post(
        DESTINATION_ADD,
        {
            **DESTINATION_FORM,
            "name": "other",
            "url": "https://other.example.org/h",
            "message_birthday": "{years}",
        },
    )

    assert created.status_code == 302
    assert Destination.objects.get().message_overrides == {"BIRTHDAY": "🎂 Happy birthday, {first_name}!"}
    assert refused.status_code == 200
    assert "BIRTHDAY: Unknown placeholder {years}" in refused.content.decode()
    assert Destination.objects.count() == 1
