"""The Destinations page of the console: create, edit, rotate, pause, resume; secrets shown once, never rendered again."""

import logging
import threading

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.db.models import F
from django.test import Client
from django.urls import reverse

from conftest import permissions_named
from delivery.destinations import services
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationSecret, Endpoint, EndpointState
from delivery.tests.pipeline import key_of, make_due
from devtools.sink import Reply, WebhookSink
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:delivery_destination_add")
LIST = reverse("admin:delivery_destination_changelist")
FORM = {
    "name": "team-slack",
    "url": "https://hooks.example.org/slack",
    "event_types": ["BIRTHDAY"],
    "format": "slack",
    "enabled": "on",
    "max_rate": "",
    "max_in_flight": "",
    "timeout": "",
    "secret": "",
}


@pytest.fixture
def sink():
    with WebhookSink() as running:
        yield running


def change_url(destination) -> str:
    return reverse("admin:delivery_destination_change", args=[destination.pk])


def shown(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def test_creating_a_destination_shows_its_secret_once_then_only_its_hint(console, caplog):
    caplog.set_level(logging.DEBUG)

    response = console.post(ADD, {**FORM, "format": "standard"})

    destination = Destination.objects.get()
    [message] = [m for m in shown(response) if "shown this once" in m]
    value = message.rsplit(": ", 1)[1]
    assert value.startswith("whsec_")
    assert (destination.created_by, destination.event_types, destination.format) == (
        "ops-alice",
        ["BIRTHDAY"],
        "standard",
    )
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
    destination = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    ).destination

    console.post(
        change_url(destination),
        {**FORM, "name": "crm", "url": "https://crm2.example.org/", "event_types": []},
    )

    destination.refresh_from_db()
    assert (destination.receiver_url(), destination.updated_by, destination.event_types) == (
        "https://crm2.example.org/",
        "ops-alice",
        [],
    )


def test_rotating_shows_the_new_secret_once_and_both_hints_after(console):
    created = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    )

    response = console.post(LIST, {"action": "rotate_secret", "_selected_action": [created.destination.pk]})

    [message] = [m for m in shown(response) if "shown this once" in m]
    new_value = message.rsplit(": ", 1)[1]
    assert new_value != created.value
    assert new_value in console.get(LIST).content.decode()  # the page after the action shows it, once
    page = console.get(change_url(created.destination)).content.decode()
    assert page.count("whsec_") >= 2 and new_value.removeprefix("whsec_") not in page
    assert created.value.removeprefix("whsec_") not in page


def test_pause_and_resume_move_the_destinations_endpoint(console):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    ).destination

    console.post(LIST, {"action": "pause", "_selected_action": [destination.pk]})
    assert Endpoint.objects.get(key=key_of(destination.receiver_url())).state == EndpointState.PAUSED
    assert "Paused" in console.get(LIST).content.decode()

    console.post(LIST, {"action": "resume", "_selected_action": [destination.pk]})
    assert Endpoint.objects.get(key=key_of(destination.receiver_url())).state == EndpointState.HEALTHY


def test_a_destination_with_deliveries_to_send_cannot_be_deleted_from_the_console(console):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    ).destination
    make_due([UserFactory().events.get()])
    Scheduler(once=True).run()
    delete = reverse("admin:delivery_destination_delete", args=[destination.pk])

    refused = console.post(delete, {"post": "yes"})
    Delivery.objects.update(status=DeliveryStatus.DELIVERED)
    console.post(delete, {"post": "yes"})

    assert any("still has 1 deliveries to send" in m for m in shown(refused))
    assert not Destination.objects.exists()
    assert Delivery.objects.count() == 1


def test_the_list_action_sends_a_test_message_to_each_selected_destination_and_shows_each_answer(
    console, sink
):
    crm = destination_create(
        settings=DestinationSettings(name="crm", url=sink.url), operator="ops-bob"
    ).destination
    sink.respond = lambda received: Reply(status=500, body=b"down for maintenance")
    chat = destination_create(
        settings=DestinationSettings(name="chat", url=sink.url + "chat", format="slack"), operator="ops-bob"
    ).destination

    response = console.post(LIST, {"action": "send_test", "_selected_action": [crm.pk, chat.pk]}, follow=True)

    answers = sorted(m for m in shown(response) if m.startswith("Test message to"))
    assert len(answers) == 2 and len(sink.received) == 2
    assert answers[0].startswith("Test message to chat: HTTP 500 (Internal Server Error) in ")
    assert answers[1].startswith("Test message to crm: HTTP 500") and answers[1].endswith(
        "answer: down for maintenance"
    )
    assert "down for maintenance" in response.content.decode()
    assert not Delivery.objects.exists()


def test_the_change_pages_button_sends_a_test_message_and_comes_back_with_its_answer(console, sink):
    created = destination_create(settings=DestinationSettings(name="crm", url=sink.url), operator="ops-bob")

    page = console.get(change_url(created.destination)).content.decode()
    response = console.post(
        reverse("admin:delivery_destination_test", args=[created.destination.pk]), follow=True
    )

    assert 'id="destination-send-test"' in page
    assert response.redirect_chain[-1][0] == change_url(created.destination)
    [answer] = [m for m in shown(response) if m.startswith("Test message to")]
    assert answer.startswith("Test message to crm: HTTP 200 in ") and answer.endswith('answer: {"ok":true}')
    assert created.value.removeprefix("whsec_") not in response.content.decode()
    assert len(sink.received) == 1


def test_the_test_message_button_sends_nothing_on_a_get(console, sink):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url=sink.url), operator="ops-bob"
    ).destination

    response = console.get(reverse("admin:delivery_destination_test", args=[destination.pk]))

    assert response.status_code == 405
    assert sink.received == []


def test_a_refused_address_is_shown_as_refused_and_no_request_is_made(console, sink, settings):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url=sink.url), operator="ops-bob"
    ).destination
    settings.WEBHOOK_ALLOWED_NETWORKS = []

    response = console.post(reverse("admin:delivery_destination_test", args=[destination.pk]), follow=True)

    [answer] = [m for m in shown(response) if m.startswith("Test message to")]
    assert (
        answer == "Test message to crm: Refused: 127.0.0.1 is a loopback address (WEBHOOK_ALLOWED_NETWORKS)"
    )
    assert sink.received == []


def edit_form(destination, **changes) -> dict:
    """The change form as its page renders it, the version it was opened at included."""
    return {
        **FORM,
        "name": destination.name,
        "url": "",  # rendered empty: the URL is a credential, revealed on request only
        "event_types": destination.event_types,
        "format": destination.format,
        "loaded_version": destination.version,
        **changes,
    }


def test_a_save_over_a_change_made_since_the_form_was_opened_is_refused_and_overwrites_nothing(
    console, django_user_model
):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    ).destination
    page = console.get(change_url(destination)).content.decode()
    assert f'name="loaded_version" value="{destination.version}"' in page
    # Two operators opened the same page (the same version); Bob saves first.
    bob = django_user_model.objects.create_superuser(username="ops-bob", password="unused-Pass-1!")
    other = Client()
    other.force_login(bob)
    other.post(change_url(destination), edit_form(destination, url="https://crm-bob.example.org/"))

    response = console.post(
        change_url(destination), edit_form(destination, url="https://crm-alice.example.org/")
    )

    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert len(errors) == 1 and "changed since you opened it (by ops-bob, now at version 2)" in errors[0]
    destination.refresh_from_db()
    assert (destination.receiver_url(), destination.updated_by, destination.version) == (
        "https://crm-bob.example.org/",
        "ops-bob",
        2,
    )


@pytest.mark.django_db(transaction=True)
def test_a_change_between_the_forms_check_and_its_save_is_refused_too(console, monkeypatch):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    ).destination
    check = services.destination_values_clean

    def bob_saves() -> None:
        try:
            Destination.objects.filter(pk=destination.pk).update(
                version=F("version") + 1, updated_by="ops-bob"
            )
        finally:
            connection.close()

    def someone_saves_meanwhile(**kwargs):
        # Bob's save commits (his own connection) after Alice's request read the destination, before her save.
        bob = threading.Thread(target=bob_saves)
        bob.start()
        bob.join()
        monkeypatch.setattr(services, "destination_values_clean", check)
        return check(**kwargs)

    monkeypatch.setattr(services, "destination_values_clean", someone_saves_meanwhile)
    response = console.post(
        change_url(destination), edit_form(destination, url="https://crm-alice.example.org/")
    )

    assert response.status_code == 200
    assert "changed since you opened it" in response.context["adminform"].form.non_field_errors()[0]
    destination.refresh_from_db()
    assert (destination.receiver_url(), destination.version) == ("https://crm.example.org/", 2)


def test_a_save_from_the_version_the_form_was_opened_at_goes_through(console):
    destination = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/"), operator="ops-bob"
    ).destination

    response = console.post(change_url(destination), edit_form(destination, url="https://crm2.example.org/"))

    assert response.status_code == 302
    destination.refresh_from_db()
    assert (destination.receiver_url(), destination.version) == ("https://crm2.example.org/", 2)


# --- the receiver URL is a credential ---------------------------------------------------------------------

SLACK = "https://hooks.slack.com/services/T0001/B0001/XXXXSECRETTOKENXXXX"
TOKEN = "XXXXSECRETTOKENXXXX"


@pytest.fixture
def viewer(django_user_model):
    """A staff account that may read destinations and endpoints but change nothing."""
    account = django_user_model.objects.create_user(
        username="ops-viewer", password="unused-Pass-1!", is_staff=True
    )
    account.user_permissions.set(
        permissions_named(
            "delivery.view_destination",
            "delivery.view_endpoint",
            "delivery.view_delivery",
            "scheduling.view_event",
        )
    )
    client = Client()
    client.force_login(account)
    return client


def test_pages_show_the_url_redacted_and_the_reveal_shows_it_whole_to_who_may_change_it(
    console, viewer, caplog
):
    caplog.set_level(logging.DEBUG)
    destination = destination_create(
        settings=DestinationSettings(name="team-slack", url=SLACK, format="slack"), operator="ops"
    ).destination
    endpoint = Endpoint.objects.get()
    reveal = reverse("admin:delivery_destination_url", args=[destination.pk])
    pages = [
        LIST,
        change_url(destination),
        reverse("admin:delivery_endpoint_changelist"),
        reverse("admin:delivery_endpoint_change", args=[endpoint.pk]),
        reverse("admin:dashboard"),
    ]

    for client in (console, viewer):
        for page in pages:
            response = client.get(page)
            assert response.status_code == 200, page
            assert TOKEN not in response.content.decode(), page
    # all of the Slack URL but its token (kinds.slack), on the destination's pages and its endpoint's
    for page in (LIST, change_url(destination), reverse("admin:delivery_endpoint_changelist")):
        assert "https://hooks.slack.com/services/T0001/B0001/…" in console.get(page).content.decode(), page
    assert "Reveal the URL" in console.get(change_url(destination)).content.decode()
    assert "Reveal the URL" not in viewer.get(change_url(destination)).content.decode()
    assert console.get(reveal).status_code == 405  # a link followed by a crawler reveals nothing
    assert viewer.post(reveal).status_code == 403
    revealed = console.post(reveal)
    assert revealed.status_code == 200 and SLACK in revealed.content.decode()
    assert "no-store" in revealed["Cache-Control"]
    assert not [m for m in shown(revealed) if TOKEN in m]  # never kept in the session's messages
    assert TOKEN not in caplog.text


def test_an_edit_that_leaves_the_url_empty_keeps_it_and_one_with_user_info_is_refused(console):
    destination = destination_create(
        settings=DestinationSettings(name="team-slack", url=SLACK), operator="ops"
    ).destination

    kept = console.post(change_url(destination), edit_form(destination, enabled=""))
    destination.refresh_from_db()
    refused = console.post(
        change_url(destination), edit_form(destination, url="https://user:pa55@hooks.example.org/x")
    )

    assert kept.status_code == 302
    assert (destination.receiver_url(), destination.enabled) == (SLACK, False)
    assert refused.status_code == 200 and "user name or password" in refused.content.decode()
    assert "pa55" not in refused.content.decode().replace('value="https://user:pa55', "")
    destination.refresh_from_db()
    assert destination.receiver_url() == SLACK


def test_creating_a_chat_destination_shows_no_secret_it_would_never_use(console):
    response = console.post(ADD, FORM)

    destination = Destination.objects.get()
    assert destination.format == "slack" and not destination.secrets.exists()
    assert not [m for m in shown(response) if "shown this once" in m]
    assert (
        "not signed: its service checks no signature" in console.get(change_url(destination)).content.decode()
    )


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"secret": "whsec_" + "A" * 32}, "A Slack destination is not signed"),
        ({"format": "standard", "secret": "nope"}, "A signing secret starts with whsec_."),
    ],
)
def test_a_secret_refused_is_said_on_its_field_and_creates_nothing(console, fields, said):
    response = console.post(ADD, {**FORM, **fields})

    assert response.status_code == 200
    assert said in response.context["adminform"].form.errors["secret"][0]
    assert not Destination.objects.exists()
