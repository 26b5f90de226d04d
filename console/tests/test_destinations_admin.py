"""The Destinations page of the console: create, edit, rotate, pause, resume; secrets shown once, never rendered again."""

import logging

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from delivery.models import Delivery, DeliveryStatus, Destination, DestinationSecret, Endpoint, EndpointState
from delivery.scheduler import Scheduler
from delivery.services.destinations import destination_create
from delivery.tests.conftest import make_due
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:delivery_destination_add")
LIST = reverse("admin:delivery_destination_changelist")
FORM = {
    "name": "team-slack", "url": "https://hooks.example.org/slack", "event_types": ["BIRTHDAY"], "format": "slack",
    "enabled": "on", "max_rate": "", "max_in_flight": "", "timeout": "", "secret": "",
}


def change_url(destination) -> str:
    return reverse("admin:delivery_destination_change", args=[destination.pk])


def shown(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_creating_a_destination_shows_its_secret_once_then_only_its_hint(console, caplog):
    caplog.set_level(logging.DEBUG)

    response = console.post(ADD, FORM)

    destination = Destination.objects.get()
    [message] = [m for m in shown(response) if "shown this once" in m]
    value = message.rsplit(": ", 1)[1]
    assert value.startswith("whsec_")
    assert (destination.created_by, destination.event_types, destination.format) == ("ops-alice", ["BIRTHDAY"], "slack")
    key = value.removeprefix("whsec_")
    assert key in console.get(response.url).content.decode()  # the page after the save shows it, once
    page = console.get(change_url(destination)).content.decode()
    listing = console.get(LIST).content.decode()
    assert DestinationSecret.objects.get().hint in page
    assert key not in page and key not in listing and key not in caplog.text


def test_bad_input_is_shown_on_the_form_and_creates_nothing(console):
    response = console.post(ADD, {**FORM, "url": "ftp://x.example.org/", "timeout": "600"})

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert set(errors) == {"url", "timeout"}
    assert not Destination.objects.exists()


def test_an_edit_is_saved_through_the_service_and_says_who_made_it(console):
    destination = destination_create(name="crm", url="https://crm.example.org/", operator="ops-bob").destination

    console.post(change_url(destination), {**FORM, "name": "crm", "url": "https://crm2.example.org/", "event_types": []})

    destination.refresh_from_db()
    assert (destination.url, destination.updated_by, destination.event_types) == (
        "https://crm2.example.org/", "ops-alice", []
    )


def test_rotating_shows_the_new_secret_once_and_both_hints_after(console):
    created = destination_create(name="crm", url="https://crm.example.org/", operator="ops-bob")

    response = console.post(LIST, {"action": "rotate_secret", "_selected_action": [created.destination.pk]})

    [message] = [m for m in shown(response) if "shown this once" in m]
    new_value = message.rsplit(": ", 1)[1]
    assert new_value != created.value
    assert new_value in console.get(LIST).content.decode()  # the page after the action shows it, once
    page = console.get(change_url(created.destination)).content.decode()
    assert page.count("whsec_") >= 2 and new_value.removeprefix("whsec_") not in page
    assert created.value.removeprefix("whsec_") not in page


def test_pause_and_resume_move_the_destinations_endpoint(console):
    destination = destination_create(name="crm", url="https://crm.example.org/", operator="ops-bob").destination

    console.post(LIST, {"action": "pause", "_selected_action": [destination.pk]})
    assert Endpoint.objects.get(url=destination.url).state == EndpointState.PAUSED
    assert "Paused" in console.get(LIST).content.decode()

    console.post(LIST, {"action": "resume", "_selected_action": [destination.pk]})
    assert Endpoint.objects.get(url=destination.url).state == EndpointState.HEALTHY


def test_a_destination_with_deliveries_to_send_cannot_be_deleted_from_the_console(console):
    destination = destination_create(name="crm", url="https://crm.example.org/", operator="ops-bob").destination
    make_due([UserFactory().events.get()])
    Scheduler(once=True).run()
    delete = reverse("admin:delivery_destination_delete", args=[destination.pk])

    refused = console.post(delete, {"post": "yes"})
    Delivery.objects.update(status=DeliveryStatus.DELIVERED)
    console.post(delete, {"post": "yes"})

    assert any("still has 1 deliveries to send" in m for m in shown(refused))
    assert not Destination.objects.exists()
    assert Delivery.objects.count() == 1
