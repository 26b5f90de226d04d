"""Email destinations through the API: made, shown without their password, and bad input a 400 naming the field."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from delivery.destinations.selectors import destination_relay
from delivery.models import Destination
from delivery.receivers.lane_settings import Relay
from scheduling.models import MessageTemplate

URL = "/api/v1/destinations/"
NEW = {
    "name": "HR mailbox",
    "url": "smtps://relay.example.com:465",
    "format": "email",
    "email_from": "greetings@example.com",
    "email_from_name": "People Team",
    "email_to": ["hr@example.com"],
    "smtp_username": "mailer",
    "smtp_password": "s3cret password",
}

pytestmark = pytest.mark.django_db


def test_an_email_destination_is_made_and_its_password_kept_encrypted_and_never_shown(api_client):
    response = api_client.post(URL, NEW, format="json")
    assert response.status_code == 201, response.json()
    shown = response.json()
    assert "smtp_password" not in shown
    assert shown["smtp_password_set"] is True
    assert shown["url"] == "smtps://relay.example.com:465/…"
    assert shown["email_to"] == ["hr@example.com"]
    destination = Destination.objects.get()
    assert "s3cret" not in destination.smtp_password_ciphertext
    relay = destination_relay(destination=destination)
    assert isinstance(relay, Relay)
    assert relay.password == "s3cret password"
    assert "s3cret" not in repr(relay)
    # a PATCH without the password keeps it
    assert (
        api_client.patch(f"{URL}{destination.pk}/", {"email_from_name": "HR"}, format="json").status_code
        == 200
    )
    destination.refresh_from_db()
    assert destination_relay(destination=destination).password == "s3cret password"


def test_a_personal_email_destination_takes_no_fixed_address(api_client):
    personal = {**NEW, "personal": True, "email_to": []}
    assert api_client.post(URL, personal, format="json").status_code == 201
    both = api_client.post(
        URL, {**NEW, "name": "both", "url": "smtps://relay2.example.com", "personal": True}, format="json"
    )
    assert both.status_code == 400
    assert set(both.json()) == {"email_to"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"email_to": ["ada@"]}, "email_to"),
        ({"url": "smtps://169.254.169.254:465"}, "url"),
        ({"url": "smtps://relay.example.com:0"}, "url"),
        ({"url": "smtp+plain://relay.example.com:25"}, "url"),
        ({"email_from": "greetings"}, "email_from"),
        ({"email_from": ""}, "email_from"),
        ({"email_reply_to": "ada@"}, "email_reply_to"),
        ({"email_from_name": "People\r\nBcc: x@example.net"}, "email_from_name"),
        ({"url": "https://hooks.example.com/x"}, "url"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_nothing_stored(api_client, settings, change, field):
    settings.WEBHOOK_ALLOW_HTTP = False  # smtp+plain:// is development's
    response = api_client.post(URL, {**NEW, **change}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()
    assert not Destination.objects.exists()


def test_another_kind_holds_no_email_settings(api_client):
    response = api_client.post(
        URL,
        {"name": "hook", "url": "https://hooks.example.com/x", "email_from": "a@example.com"},
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()) == {"email_from"}


def test_a_subject_template_naming_an_unknown_placeholder_is_refused_naming_the_subject():
    template = MessageTemplate(
        event_type="BIRTHDAY", language="de", body="Hallo {first_name}", subject="Für {nickname}"
    )
    with pytest.raises(ValidationError) as refused:
        template.full_clean()
    assert set(refused.value.message_dict) == {"subject"}
    # an age is no subject's: it shows in an inbox's list
    template.subject = "{first_name} wird {age}"
    with pytest.raises(ValidationError) as refused:
        template.full_clean()
    assert set(refused.value.message_dict) == {"subject"}
