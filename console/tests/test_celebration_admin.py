"""The person's say in the console: visibility and hide_age on the recipient's form, recorded as the
operator's; the texts they will get and the record of their choices on their page; the company default."""

from datetime import date

import pytest
from django.urls import reverse

from console.tests.test_recipients_admin import form_data
from scheduling.celebration import YEARLESS_YEAR, ChangedBy
from scheduling.models import CelebrationDefault, EventType, MessageTemplate
from users.models import CelebrationChange, CelebrationChoice, User
from users.services import user_create

pytestmark = pytest.mark.django_db


def test_an_operator_sets_visibility_and_hide_age_and_the_page_shows_the_text_and_the_record(console):
    MessageTemplate.objects.filter(event_type=EventType.BIRTHDAY, language="").update(
        body="{first_name} turns {age}!"
    )
    user = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 14), timezone="UTC"
    )
    url = reverse("admin:users_user_change", args=[user.pk])

    response = console.post(url, form_data(user, hide_age="on", visibility_BIRTHDAY="private"))

    assert response.status_code == 302, response.context["adminform"].form.errors
    assert CelebrationChoice.objects.get(user=user).visibility == "private"
    changes = {
        (c.field, c.changed_by, c.actor, c.new_value) for c in CelebrationChange.objects.filter(user=user)
    }
    assert changes == {
        ("visibility", ChangedBy.OPERATOR, "ops-alice", "private"),
        ("hide_age", ChangedBy.OPERATOR, "ops-alice", "true"),
    }
    page = console.get(url).content.decode()
    # the text they will get: the built-in one, since theirs would say the age
    assert "Hey, Ada Lovelace it&#x27;s your birthday" in page
    assert "they chose never to have it said" in page
    assert "from default to private, by An operator, in the console (ops-alice)" in page


def test_a_birthday_without_a_year_is_typed_and_shown_as_month_and_day_and_a_bad_one_named(console):
    add = reverse("admin:users_user_add")

    bad = console.post(add, form_data(date_of_birth="--02-30"))
    good = console.post(add, form_data(date_of_birth="--02-29"))

    assert bad.status_code == 200 and "date_of_birth" in bad.context["adminform"].form.errors
    assert good.status_code == 302
    user = User.objects.get()
    assert user.date_of_birth == date(YEARLESS_YEAR, 2, 29)
    assert (
        'value="--02-29"' in console.get(reverse("admin:users_user_change", args=[user.pk])).content.decode()
    )


def test_an_operator_sets_the_company_default_recorded_as_theirs(console):
    response = console.post(
        reverse("admin:scheduling_celebrationdefault_add"), {"event_type": "BIRTHDAY", "visibility": "none"}
    )

    assert response.status_code == 302
    default = CelebrationDefault.objects.get()
    assert (default.event_type, default.visibility, default.updated_by) == ("BIRTHDAY", "none", "ops-alice")


def test_a_recipients_page_shows_the_destinations_they_left_the_record_and_an_undeliverable_address(console):
    from delivery.actions.optouts import destination_opt_out_set
    from delivery.destinations.services import destination_url_fields
    from delivery.models import Destination
    from users.services import recipient_email_undeliverable_mark

    user = user_create(
        first_name="Ada",
        last_name="L",
        date_of_birth=date(1990, 5, 5),
        timezone="UTC",
        email="ada@example.com",
    )
    general = Destination.objects.create(
        name="#general", **destination_url_fields(url="https://chat.example/g")
    )
    destination_opt_out_set(user=user, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)
    recipient_email_undeliverable_mark(email="ada@example.com", reason="550 5.1.1 unknown user")

    page = console.get(reverse("admin:users_user_change", args=[user.pk])).content.decode()

    assert "destinations they left" in page.lower() and "#general" in page
    assert "destination #general from in to out, by The person, through their page" in page
    assert "550 5.1.1 unknown user" in page


def test_a_recipients_page_lists_the_links_issued_to_their_page_and_which_one_opens_it(console):
    from scheduling.celebration import ChangedBy as By
    from users.services import personal_link_issue

    user = user_create(first_name="Ada", last_name="L", date_of_birth=date(1990, 5, 5), timezone="UTC")
    first = personal_link_issue(user_id=user.pk, issued_by=By.API_CLIENT, actor="hr-sync")
    second = personal_link_issue(user_id=user.pk, issued_by=By.OPERATOR, actor="ops-alice")

    page = console.get(reverse("admin:users_user_change", args=[user.pk])).content.decode()

    assert "links to their page" in page.lower()
    assert "An operator, in the console (ops-alice): opens their page" in page
    assert "An API client (hr-sync): revoked by a later link" in page
    # never the URL itself
    assert first.url not in page and second.url not in page
