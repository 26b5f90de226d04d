"""A recipient's own email address: checked and normalised by one rule (users.validators.clean_email), through the
API, the CSV import and the console alike, and held in that shape by the database."""

import pytest
from django.db import IntegrityError, transaction
from django.urls import reverse

from console.tests.test_recipients_admin import form_data
from scheduling.models import Event
from users.models import User
from users.tests.test_api import USERS_URL, assert_refused_and_nothing_stored, valid_payload
from users.tests.test_import_users import run_failing_import, run_import, write_csv
from users.validators import clean_email

pytestmark = pytest.mark.django_db

REFUSED = [
    "ada@",
    "ada",
    "@example.com",
    "ada@localhost",  # no domain name with a dot: nothing a relay outside can reach
    "ada@[192.0.2.1]",
    '"ada lovelace"@example.com',
    "ada..lovelace@example.com",
    "ada@exa mple.com",
    "ada@-example.com",
    "ada\r\nBcc: eve@example.com",
    "ada@example.com\r\nBcc: eve@example.com",
    "a" * 250 + "@example.com",
]
NORMALISED = [
    ("  ada@example.com ", "ada@example.com"),
    ("Ada.Lovelace@Example.COM", "Ada.Lovelace@example.com"),  # the local part is the domain's to read
    ("ada@Bücher.Example", "ada@xn--bcher-kva.example"),
    ("ada+greetings@xn--bcher-kva.example", "ada+greetings@xn--bcher-kva.example"),
    ("ada@faß.de", "ada@xn--fa-hia.de"),  # IDNA 2008: ß is kept, not mapped to ss
]


@pytest.mark.parametrize("value", REFUSED)
def test_an_address_that_is_none_is_refused_with_a_400_naming_the_field_and_nothing_stored(api_client, value):
    body = assert_refused_and_nothing_stored(api_client, valid_payload(email=value), bad_fields={"email"})

    assert body["email"][0].startswith("Email")


def test_a_wrongly_typed_email_is_refused_naming_the_field(api_client):
    assert_refused_and_nothing_stored(
        api_client, valid_payload(email=["ada@example.com"]), bad_fields={"email"}
    )


@pytest.mark.parametrize("given, stored", NORMALISED)
def test_an_address_is_stored_and_shown_normalised(api_client, given, stored):
    response = api_client.post(USERS_URL, valid_payload(email=given), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["email"] == stored
    assert User.objects.get().email == stored == clean_email(stored)  # normalised once is normalised


def test_none_is_empty_and_a_put_without_it_keeps_it_and_null_removes_it(api_client):
    created = api_client.post(USERS_URL, valid_payload(), format="json").json()
    assert created["email"] == ""
    url = f"{USERS_URL}{created['id']}/"

    api_client.patch(url, {"email": "ada@example.com"}, format="json")
    kept = api_client.put(url, valid_payload(first_name="Augusta"), format="json")
    assert kept.status_code == 200 and kept.json()["email"] == "ada@example.com"

    cleared = api_client.patch(url, {"email": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["email"] == ""
    assert User.objects.get().email == ""


def test_a_bad_edit_is_refused_and_changes_nothing(api_client):
    created = api_client.post(USERS_URL, valid_payload(email="ada@example.com"), format="json").json()

    response = api_client.patch(f"{USERS_URL}{created['id']}/", {"email": "ada@"}, format="json")

    assert response.status_code == 400 and set(response.json()) == {"email"}
    assert User.objects.get().email == "ada@example.com"


@pytest.mark.parametrize("value", ["Ada@Example.COM", "ada@", "ada lovelace@example.com", " ada@example.com"])
def test_the_database_refuses_an_address_not_in_the_stored_shape(api_client, value):
    created = api_client.post(USERS_URL, valid_payload(), format="json").json()

    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.filter(pk=created["id"]).update(email=value)


def test_the_import_reads_the_email_column_normalised(tmp_path):
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,email\n"
        "Ada,Lovelace,1990-05-05,Europe/London,Ada@Bücher.Example\n"
        "Alan,Turing,1980-06-23,Europe/London,\n",
    )

    run_import(path)

    assert dict(User.objects.values_list("first_name", "email")) == {
        "Ada": "Ada@xn--bcher-kva.example",
        "Alan": "",
    }


def test_the_import_refuses_a_bad_email_naming_its_line_and_column_and_imports_nothing(tmp_path):
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,email\n"
        "Ada,Lovelace,1990-05-05,Europe/London,ada@example.com\n"
        "Alan,Turing,1980-06-23,Europe/London,ada@\n",
    )

    _message, stderr = run_failing_import(path)

    assert stderr.startswith("line 3:") and "email" in stderr, stderr
    assert not User.objects.exists() and not Event.objects.exists()


def test_the_console_refuses_a_bad_email_on_its_field_with_the_shared_message(console):
    response = console.post(reverse("admin:users_user_add"), form_data(email="ada@"))

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["email"] and errors["email"][0].startswith("Email must be an address")
    assert 'type="email"' in response.content.decode()  # a phone offers its email keyboard
    assert not User.objects.exists()


def test_the_console_stores_an_email_normalised(console):
    response = console.post(reverse("admin:users_user_add"), form_data(email=" ada@Bücher.Example "))

    assert response.status_code == 302
    assert User.objects.get().email == "ada@xn--bcher-kva.example"


# --- an address refused for good ------------------------------------------------------------


def test_an_address_is_marked_undeliverable_only_on_who_holds_it_now_and_a_new_one_clears_it():
    from datetime import date

    from users.services import recipient_email_undeliverable_mark, user_create, user_update

    ada = user_create(
        first_name="Ada",
        last_name="L",
        date_of_birth=date(1990, 5, 5),
        timezone="UTC",
        email="Ada@Example.com",
    )
    grace = user_create(
        first_name="Grace",
        last_name="H",
        date_of_birth=date(1990, 5, 5),
        timezone="UTC",
        email="grace@example.com",
    )

    assert recipient_email_undeliverable_mark(email="ADA@example.com", reason="550 5.1.1 no such user") == 1
    assert recipient_email_undeliverable_mark(email="ada@example.com", reason="again") == 0
    assert recipient_email_undeliverable_mark(email="nobody@example.com", reason="x") == 0
    assert recipient_email_undeliverable_mark(email="not an address", reason="x") == 0
    ada.refresh_from_db()
    grace.refresh_from_db()
    assert (
        ada.email_undeliverable_at is not None and ada.email_undeliverable_reason == "550 5.1.1 no such user"
    )
    assert grace.email_undeliverable_at is None

    user_update(user=ada, data={"email": "ada@new.example"})

    ada.refresh_from_db()
    assert (ada.email_undeliverable_at, ada.email_undeliverable_reason) == (None, "")
    # a late bounce of the old address marks nothing now
    assert recipient_email_undeliverable_mark(email="ada@example.com", reason="late") == 0


def test_the_api_shows_an_undeliverable_address_and_a_client_cannot_clear_it(api_client):
    from datetime import date

    from users.services import recipient_email_undeliverable_mark, user_create

    ada = user_create(
        first_name="Ada",
        last_name="L",
        date_of_birth=date(1990, 5, 5),
        timezone="UTC",
        email="ada@example.com",
    )
    recipient_email_undeliverable_mark(email="ada@example.com", reason="550 no such user")

    shown = api_client.get(f"/api/v1/users/{ada.pk}/").json()
    assert shown["email_undeliverable_reason"] == "550 no such user" and shown["email_undeliverable_at"]

    # read-only: a client cannot clear it; a new address does
    api_client.patch(f"/api/v1/users/{ada.pk}/", {"email_undeliverable_at": None}, format="json")
    ada.refresh_from_db()
    assert ada.email_undeliverable_at is not None
