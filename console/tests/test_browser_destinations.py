"""Destinations in a real browser: create one (its secret shown once), send it a test message, pause and
resume it, recover what it got in a window (the count shown first).

Chromium and its pages come from console/tests/conftest.py, the live server from
pytest-django. Each step an operator takes is a helper below, so that a scenario
grows by a step (and a helper) rather than by copying.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from console.tests.test_browser import PASSWORD, deliver_due_in_a_thread, log_in
from delivery.dispatch.scheduler import Scheduler
from delivery.models import (
    Delivery,
    DeliveryStatus,
    Destination,
    Endpoint,
    EndpointState,
    Recovery,
    RecoveryStatus,
)
from delivery.tests.pipeline import make_due
from devtools.sink import WebhookSink
from users.tests.factories import UserFactory

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
    shown = re.search(
        rf"Signing secret of {re.escape(name)}, shown this once .*: (whsec_\S+)", page_messages(page)
    )
    assert shown, page_messages(page)
    return shown.group(1)


def open_destination(page, live_server, destination: Destination) -> None:
    page.goto(live_server.url + reverse("admin:delivery_destination_changelist"))
    # The list links each destination by its name, its URL under it.
    page.locator("#result_list a", has=page.locator("strong", has_text=destination.name)).click()
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


def condition_column(page, destination: Destination) -> str:
    row = page.locator("#result_list tbody tr", has_text=destination.name)
    return row.locator("td.field-condition").inner_text().strip()


def recover(page, destination: Destination, *, states: list[str], since: datetime, until: datetime) -> str:
    """From the destination's page: Recover, the states and the window, Count; return the count shown (nothing
    is recorded yet). The caller confirms with `#recover-yes`."""
    page.click("#destination-recover")
    page.wait_for_url(re.compile(rf".*/delivery/destination/{destination.pk}/recover/$"))
    for box in page.locator("input[name=states]").all():
        box.set_checked(box.get_attribute("value") in states)
    page.fill("#id_since", since.strftime("%Y-%m-%dT%H:%M:%S"))
    page.fill("#id_until", until.strftime("%Y-%m-%dT%H:%M:%S"))
    page.click("#recover-count-button")
    page.wait_for_selector("#recover-count")
    return page.locator("#recover-count").inner_text()


def test_operator_creates_a_destination_tests_pauses_resumes_and_recovers_it(
    page, live_server, settings, sink, django_user_model
):
    settings.WEBHOOK_URL = ""  # no default destination: every greeting goes to the one created here
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=5)
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
    assert re.fullmatch(r'Test message to team-hook: HTTP 200 in \d+ ms; answer: \{"ok":true\}', answer), (
        answer
    )
    [request] = sink.received
    assert Webhook(secret).verify(request.raw_body, request.headers)["event_type"] == "destination.test"
    assert not Delivery.objects.exists()

    # Paused, then resumed, from the list.
    assert "Pause: 1 destination paused." in run_list_action(page, live_server, destination, "pause")
    assert condition_column(page, destination) == "Paused"
    assert Endpoint.objects.get(key=destination.url_key).state == EndpointState.PAUSED
    assert "Resume: 1 destination resumed." in run_list_action(page, live_server, destination, "resume")
    assert condition_column(page, destination) == "No deliveries yet"  # resumed; nothing sent to it yet
    assert Endpoint.objects.get(key=destination.url_key).state == EndpointState.HEALTHY

    # Three greetings reach it; the receiver loses them (it answered 200 and dropped them).
    for _ in range(3):
        UserFactory()
    make_due()
    Scheduler(once=True).run()
    deliver_due_in_a_thread()
    assert Delivery.objects.filter(destination=destination, status=DeliveryStatus.DELIVERED).count() == 3
    greetings = [r.idempotency_key for r in sink.received if not r.idempotency_key.startswith("test-")]
    assert len(greetings) == 3

    # Recover what it got in the last hour: the count first, nothing recorded before the operator confirms.
    open_destination(page, live_server, destination)
    now = timezone.now()
    count = recover(
        page,
        destination,
        states=["DELIVERED"],
        since=now - timedelta(hours=1),
        until=now + timedelta(minutes=1),
    )
    assert count == "3"
    assert not Recovery.objects.exists()
    page.click("#recover-yes")
    page.wait_for_url(re.compile(rf".*/delivery/destination/{destination.pk}/change/.*"))
    assert "Recovery recorded" in page_messages(page)
    assert page.locator("#recoveries tr.recovery .recovery-status").inner_text().strip() == "Pending"

    # A worker carries it out; the page shows it done, and each greeting arrived again under its key.
    deliver_due_in_a_thread()
    page.reload()
    row = page.locator("#recoveries tr.recovery")
    assert row.locator(".recovery-status").inner_text().strip() == "Finished"
    assert row.locator(".recovery-progress").inner_text().strip() == "3 of 3 queued again"
    assert Recovery.objects.get().status == RecoveryStatus.FINISHED
    again = Counter(r.idempotency_key for r in sink.received if not r.idempotency_key.startswith("test-"))
    assert again == {key: 2 for key in greetings}
