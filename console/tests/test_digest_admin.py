"""A destination's daily digest in the console: set on its page, the next digest shown there and in the list."""

import pytest
from django.urls import reverse

from delivery.models import Destination
from delivery.services.destinations import destination_create

pytestmark = pytest.mark.django_db

ADD = reverse("admin:delivery_destination_add")
LIST = reverse("admin:delivery_destination_changelist")
FORM = {
    "name": "platform",
    "url": "https://hooks.example.org/platform",
    "format": "slack",
    "enabled": "on",
    "max_rate": "",
    "max_in_flight": "",
    "timeout": "",
    "secret": "",
}


def test_an_operator_gives_a_destination_a_digest_time_and_sees_the_next_digest(console):
    # when an operator creates a destination with a digest at 09:30 Berlin, Monday after
    response = console.post(
        ADD, {**FORM, "digest_time": "09:30", "digest_timezone": "Europe/Berlin", "weekend": "MONDAY_AFTER"}
    )

    # then it is saved with its next digest, a weekday, shown on its page and in the list
    assert response.status_code == 302, response.content.decode()[:2000]
    destination = Destination.objects.get()
    assert destination.next_digest_date is not None and destination.next_digest_date.weekday() < 5
    page = console.get(reverse("admin:delivery_destination_change", args=[destination.pk])).content.decode()
    assert "Daily digest" in page and destination.next_digest_date.isoformat() in page
    listing = console.get(LIST).content.decode()
    assert "daily 09:30 Europe/Berlin" in listing and destination.next_digest_date.isoformat() in listing


def test_the_console_refuses_a_weekend_move_without_a_digest_naming_the_field(console):
    response = console.post(ADD, {**FORM, "weekend": "FRIDAY_BEFORE"})

    assert response.status_code == 200
    assert "Only a daily digest moves weekend greetings" in response.content.decode()
    assert not Destination.objects.exists()


def test_a_destination_without_a_digest_says_so_in_the_list(console):
    destination_create(name="each", url="https://hooks.example.org/each", operator="ops")

    assert "per greeting" in console.get(LIST).content.decode()
