"""The operator console in a real browser: Debian's Chromium driven by Playwright.

The browser and its pages are console/tests/conftest.py's fixtures (never
`playwright install`). If Chromium cannot start, these tests fail rather than skip.
"""

from __future__ import annotations

import os
import re
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from console.tests.console_data import endpoint, populate_demo, waiting_for
from delivery.models import EndpointState
from delivery.worker.loop import Worker
from devtools.sink import WebhookSink
from scheduling.models import Event, EventStatus
from users.tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# docs/operations.md shows the dashboard and the events list as this test leaves them.
# SCREENSHOTS_DIR=docs/screenshots refreshes those copies; otherwise the screenshots go to
# the test's own folder, so that a run leaves the checkout as it found it.
SCREENSHOTS_DIR = os.environ.get("SCREENSHOTS_DIR")
PASSWORD = "Browser-pass-2026!"


@pytest.fixture
def sink():
    with WebhookSink() as running:
        yield running


def deliver_due_in_a_thread() -> None:
    """A worker run (--once) in a thread of its own.

    Playwright's sync API keeps an asyncio loop running in this thread, and the
    worker runs its own loop, which asyncio refuses inside another. The command
    cannot move to a thread with it: signal handlers are installed from the
    main thread only, so the thread runs the Worker the command would.
    """
    failures: list[BaseException] = []

    def run() -> None:
        try:
            Worker(concurrency=2, once=True).run()
        except BaseException as exc:  # reported to the test below
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="browser-test-worker")
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the worker did not finish within 60 s"
    assert failures == []


def log_in(page, live_server, *, username: str, password: str) -> None:
    page.goto(live_server.url + reverse("admin:login"))
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
    page.wait_for_url(live_server.url + reverse("admin:index"))


def test_operator_logs_in_checks_the_dashboard_and_resends_a_failed_event(
    page, live_server, settings, sink, django_user_model, tmp_path
):
    settings.WEBHOOK_URL = sink.url  # before the data, whose deliveries copy it
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=5)
    demo = populate_demo()
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    target = demo["failed"][0]
    screenshots = Path(SCREENSHOTS_DIR) if SCREENSHOTS_DIR else tmp_path
    screenshots.mkdir(parents=True, exist_ok=True)

    # Log in through the form: the landing page is the dashboard.
    log_in(page, live_server, username="ops-alice", password=PASSWORD)
    assert "Birthday scheduler operations" in page.title()
    assert page.locator("#attention").is_visible()
    assert page.locator("#backlog .bs-big").inner_text().strip() == "3"
    assert page.locator("#processes tr.process-lost").count() == 1
    assert page.locator("svg.bs-chart rect.bar").count() == 24
    assert int(page.locator("#delivered-hour").inner_text()) >= 1

    # Events, filtered by status from the sidebar.
    page.goto(live_server.url + reverse("admin:scheduling_event_changelist"))
    page.locator("#changelist-filter").get_by_role("link", name="Failed", exact=True).click()
    page.wait_for_url(re.compile(r".*status__exact=FAILED.*"))
    assert page.locator("#result_list tbody tr").count() == len(demo["failed"])

    # Resend one FAILED event, after a page saying what will happen.
    page.check(f"input[name=_selected_action][value='{target.pk}']")
    page.select_option("select[name=action]", "resend")
    page.click("button[name=index]")
    page.wait_for_load_state()
    assert "1 event" in page.locator("#confirm-count").inner_text()
    page.click("#confirm-yes")
    page.wait_for_load_state()
    assert "Resend: 1 event queued" in page.locator("ul.messagelist").inner_text()

    # A worker sends it to the receiver.
    deliver_due_in_a_thread()
    assert target.idempotency_key in sink.keys()

    page.goto(live_server.url + reverse("admin:scheduling_event_change", args=[target.pk]))
    status = page.locator(".field-status_badge .readonly").inner_text()
    assert status.strip() == "Completed"
    target.refresh_from_db()
    assert target.status == EventStatus.COMPLETED
    assert Event.objects.filter(status=EventStatus.FAILED).count() == len(demo["failed"]) - 1

    # The events list as an operator sees it, for the docs: today's events by
    # send time (o=4: the send time column).
    now = timezone.now()
    page.goto(
        live_server.url
        + reverse("admin:scheduling_event_changelist")
        + f"?target_timestamp_utc__year={now.year}&target_timestamp_utc__month={now.month}"
        + f"&target_timestamp_utc__day={now.day}&o=4"
    )
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(screenshots / "events.png"), full_page=True)


def test_a_wrong_password_keeps_the_operator_out(page, live_server, django_user_model):
    django_user_model.objects.create_superuser(username="ops-bob", password=PASSWORD)

    page.goto(live_server.url + reverse("admin:login"))
    page.fill("#id_username", "ops-bob")
    page.fill("#id_password", "not-the-password")
    page.click("input[type=submit]")

    assert "Please enter the correct username and password" in page.locator(".errornote").inner_text()
    page.goto(live_server.url + reverse("admin:dashboard"))
    assert "/login/" in page.url


def test_operator_pauses_a_failing_endpoint_and_resumes_it(page, live_server, django_user_model):
    receiver = endpoint("https://hooks.example.com/birthdays", state=EndpointState.FAILING)
    for _ in range(2):
        waiting_for(UserFactory(), receiver.url)
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)

    # From the endpoints list, where the failing receiver and its backlog show.
    log_in(page, live_server, username="ops-alice", password=PASSWORD)
    page.goto(live_server.url + reverse("admin:delivery_endpoint_changelist"))
    # The list shows what may be shown of the URL (a credential): its host, never its path or token.
    row = page.locator("#result_list tbody tr", has_text=receiver.url_display)
    assert row.locator("td.field-state_badge").inner_text().strip() == "Failing"
    assert row.locator("td.field-queued").inner_text().strip() == "2"
    row.get_by_role("link", name=receiver.url_display).click()
    page.wait_for_url(re.compile(rf".*/delivery/endpoint/{receiver.pk}/change/$"))

    # Pause: the page comes back saying who paused it, and offers Resume.
    page.click("#endpoint-pause")
    page.wait_for_url(re.compile(rf".*/delivery/endpoint/{receiver.pk}/change/$"))
    assert "Pause: 1 endpoint paused." in page.locator("ul.messagelist").inner_text()
    assert page.locator("#endpoint-paused-by").inner_text() == "ops-alice"
    assert page.locator(".field-state_badge .readonly").inner_text().strip() == "Paused"
    receiver.refresh_from_db()
    assert (receiver.state, receiver.paused_by) == (EndpointState.PAUSED, "ops-alice")

    # Resume: healthy again, and Pause is offered again.
    page.click("#endpoint-resume")
    page.wait_for_url(re.compile(rf".*/delivery/endpoint/{receiver.pk}/change/$"))
    assert "Resume: 1 endpoint resumed." in page.locator("ul.messagelist").inner_text()
    assert page.locator(".field-state_badge .readonly").inner_text().strip() == "Healthy"
    assert page.locator("#endpoint-pause").is_visible()
    receiver.refresh_from_db()
    assert receiver.state == EndpointState.HEALTHY
