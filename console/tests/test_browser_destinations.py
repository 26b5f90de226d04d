"""Destinations in a real browser: create one (its secret shown once), send it a test message, pause, resume.

Chromium and its pages come from console/tests/conftest.py, the live server from
pytest-django. Each step an operator takes is a helper below, so that a scenario
grows by a step (and a helper) rather than by copying.
"""

from __future__ import annotations

import re

import pytest
from django.urls import reverse
from standardwebhooks.webhooks import Webhook

from console.tests.test_browser import PASSWORD, log_in
from delivery.models import Delivery, Destination, Endpoint, EndpointState
from devtools.sink import WebhookSink

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def sink():
    with WebhookSink() as running:
        yield running


def page_messages(page) -> str:
    return page.locator("ul.messagelist").inner_text()


def create_destination(page, live_server, *, name: str, url: str) -> str:
    """Fill the add form and save; return the signing secret the page shows this once."""
    page.goto(live_server.url + reverse("admin:delivery_destination_add"))
    page.fill("#id_name", name)
    page.fill("#id_url", url)
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r".*/delivery/destination/$"))
    shown = re.search(rf"Signing secret of {re.escape(name)}, shown this once .*: (whsec_\S+)", page_messages(page))
    assert shown, page_messages(page)
    return shown.group(1)


def open_destination(page, live_server, destination: Destination) -> None:
    page.goto(live_server.url + reverse("admin:delivery_destination_changelist"))
    page.locator("#result_list").get_by_role("link", name=destination.name, exact=True).click()
    page.wait_for_url(re.compile(rf".*/delivery/destination/{destination.pk}/change/$"))


def send_test_message(page, destination: Destination) -> str:
    """Click the change page's button; return the answer the page shows."""
    page.click("#destination-send-test")
    page.wait_for_url(re.compile(rf".*/delivery/destination/{destination.pk}/change/$"))
    [answer] = [line for line in page_messages(page).splitlines() if line.startswith("Test message to")]
    return answer


def run_list_action(page, live_server, destination: Destination, action: str) -> str:
    """Select `destination` on the list, run `action` on it; return the page's messages."""
    page.goto(live_server.url + reverse("admin:delivery_destination_changelist"))
    page.check(f"input[name=_selected_action][value='{destination.pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    page.wait_for_load_state()
    return page_messages(page)


def endpoint_column(page, destination: Destination) -> str:
    row = page.locator("#result_list tbody tr", has_text=destination.url)
    return row.locator("td.field-endpoint_state").inner_text().strip()


def test_operator_creates_a_destination_sends_it_a_test_message_pauses_and_resumes_it(
    page, live_server, sink, django_user_model
):
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    log_in(page, live_server, username="ops-alice", password=PASSWORD)

    # Created: the secret is shown once, in the page's messages, and on no page after.
    secret = create_destination(page, live_server, name="team-hook", url=sink.url)
    destination = Destination.objects.get(name="team-hook")
    open_destination(page, live_server, destination)
    assert secret.removeprefix("whsec_") not in page.content()
    assert destination.secrets.get().hint in page.content()

    # A test message: the receiver gets it signed with that secret; the page shows its answer.
    answer = send_test_message(page, destination)
    assert re.fullmatch(r'Test message to team-hook: HTTP 200 in \d+ ms; answer: \{"ok":true\}', answer), answer
    [request] = sink.received
    assert Webhook(secret).verify(request.raw_body, request.headers)["event_type"] == "destination.test"
    assert not Delivery.objects.exists()

    # Paused, then resumed, from the list.
    assert "Pause: 1 destination paused." in run_list_action(page, live_server, destination, "pause")
    assert endpoint_column(page, destination) == "Paused"
    assert Endpoint.objects.get(url=destination.url).state == EndpointState.PAUSED
    assert "Resume: 1 destination resumed." in run_list_action(page, live_server, destination, "resume")
    assert endpoint_column(page, destination) == "Healthy"
    assert Endpoint.objects.get(url=destination.url).state == EndpointState.HEALTHY
