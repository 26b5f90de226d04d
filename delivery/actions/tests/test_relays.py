"""An email destination's relay settings as the lanes and the test message hand them to the transport."""

from __future__ import annotations

import uuid

import pytest

from delivery.actions.optouts import unsubscribe_token_read, unsubscribe_url
from delivery.actions.relays import relay_for_sending
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create

pytestmark = pytest.mark.django_db


def test_its_unsubscribe_urls_are_the_foundations_for_that_person_and_destination(settings):
    settings.PUBLIC_BASE_URL = "https://greetings.example.com/"
    destination = destination_create(
        settings=DestinationSettings(
            name="mail",
            url="smtps://relay.example.com",
            format="email",
            personal=True,
            email_from="greetings@example.com",
        ),
        operator="ops",
    ).destination
    relay = relay_for_sending(destination=destination)
    assert relay is not None and relay.unsubscribe is not None
    person = uuid.uuid4()
    url = relay.unsubscribe(str(person))
    assert url == unsubscribe_url(user_id=person, destination_id=destination.pk)
    assert url.startswith("https://greetings.example.com/p/unsubscribe/")
    assert unsubscribe_token_read(token=url.rstrip("/").rsplit("/", 1)[1]) == (person, destination.pk)
