"""A destination declares whether it reaches the person alone (personal); a digest never does."""

import pytest

from delivery.models import Destination

pytestmark = pytest.mark.django_db
URL = "/api/v1/destinations/"


def test_a_destination_is_not_personal_unless_declared_and_may_be_declared(api_client):
    plain = api_client.post(
        URL, {"name": "general", "url": "https://chat.example.org/general"}, format="json"
    )
    inbox = api_client.post(
        URL, {"name": "inbox", "url": "https://mail.example.org/inbox", "personal": True}, format="json"
    )

    assert (plain.status_code, inbox.status_code) == (201, 201), (plain.content, inbox.content)
    assert (plain.json()["personal"], inbox.json()["personal"]) == (False, True)


def test_a_personal_digest_is_a_400_naming_personal_and_nothing_is_stored(api_client):
    response = api_client.post(
        URL,
        {
            "name": "digest",
            "url": "https://chat.example.org/digest",
            "personal": True,
            "digest_time": "09:00",
            "digest_timezone": "Europe/Berlin",
        },
        format="json",
    )

    assert response.status_code == 400
    assert list(response.json()) == ["personal"]
    assert not Destination.objects.exists()
