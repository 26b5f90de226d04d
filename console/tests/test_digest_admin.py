"""A destination's daily digest in the console: set on its page, the next digest shown there and in the list."""

import pytest
from django.urls import reverse

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create, destination_url_fields
from delivery.models import Destination

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
    assert "Daily or weekly digest" in page and destination.next_digest_date.isoformat() in page
    listing = console.get(LIST).content.decode()
    assert "daily 09:30 Europe/Berlin" in listing and destination.next_digest_date.isoformat() in listing


def test_the_console_refuses_a_weekend_move_without_a_digest_naming_the_field(console):
    response = console.post(ADD, {**FORM, "weekend": "FRIDAY_BEFORE"})

    assert response.status_code == 200
    assert "Only a daily digest moves weekend greetings" in response.content.decode()
    assert not Destination.objects.exists()


def test_a_destination_without_a_digest_says_so_in_the_list(console):
    destination_create(
        settings=DestinationSettings(name="each", url="https://hooks.example.org/each"), operator="ops"
    )

    assert "per greeting" in console.get(LIST).content.decode()


def test_the_deliveries_page_lists_a_digest_finds_it_by_its_key_and_filters_digests(console):
    from datetime import datetime, time, timedelta
    from zoneinfo import ZoneInfo

    from django.utils import timezone

    from delivery.dispatch.digests import digests_build_due
    from delivery.models import Delivery
    from delivery.rules.digest_calendar import digest_schedule
    from users.tests.factories import UserFactory

    # given a queued digest naming two people, beside nothing else
    berlin = ZoneInfo("Europe/Berlin")
    day = timezone.now().astimezone(berlin).date() + timedelta(days=3)
    for first in ("Ada", "Grace"):
        UserFactory(first_name=first, date_of_birth=day.replace(year=1990), timezone="Europe/Berlin")
    destination = Destination(
        name="team",
        **destination_url_fields(url="https://hooks.example.org/team"),
        digest_time=time(9),
        digest_timezone="Europe/Berlin",
    )
    digest_schedule(destination=destination, now=datetime.combine(day, time(8), tzinfo=berlin))
    destination.save()
    digests_build_due(now=datetime.combine(day, time(9), tzinfo=berlin))
    delivery = Delivery.objects.get()
    deliveries = reverse("admin:delivery_delivery_changelist")

    # then the list says what it is, its key finds it, and the digest filter keeps it
    said = f"Daily digest of {day.isoformat()}: 2 occurrences"
    assert said in console.get(deliveries).content.decode()
    assert said in console.get(deliveries, {"q": delivery.idempotency_key}).content.decode()
    assert said in console.get(deliveries, {"kind": "digest"}).content.decode()
    assert said not in console.get(deliveries, {"kind": "occurrence"}).content.decode()
    # and its own page too
    page = console.get(reverse("admin:delivery_delivery_change", args=[delivery.pk])).content.decode()
    assert said in page


def test_an_operator_sets_a_weekly_german_digest_a_week_ahead_and_the_list_says_so(console):
    response = console.post(
        ADD,
        {
            **FORM,
            "digest_time": "09:00",
            "digest_timezone": "Europe/Berlin",
            "weekend": "ON_THE_DAY",
            "digest_days_ahead": "7",
            "digest_weekday": "MONDAY",
            "digest_language": "de",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    destination = Destination.objects.get()
    assert (destination.digest_weekday, destination.digest_days_ahead, destination.digest_language) == (
        "MONDAY",
        7,
        "de",
    )
    assert destination.next_digest_date is not None and destination.next_digest_date.weekday() == 0
    listing = console.get(LIST).content.decode()
    assert "Mondays 09:00 Europe/Berlin, 7 days ahead" in listing
    assert destination.next_digest_date.isoformat() in listing


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"digest_days_ahead": "31"}, "A whole number of days from 0 (the day itself) to 30."),
        ({"digest_weekday": "FUNDAY"}, "Select a valid choice."),
        ({"digest_weekday": "MONDAY", "weekend": "FRIDAY_BEFORE"}, "A weekly digest names the weekend"),
    ],
)
def test_the_console_refuses_a_digest_it_cannot_send_saying_why(console, fields, said):
    response = console.post(
        ADD, {**FORM, "digest_time": "09:00", "digest_timezone": "Europe/Berlin", **fields}
    )

    assert response.status_code == 200
    assert said in response.content.decode()
    assert not Destination.objects.exists()
