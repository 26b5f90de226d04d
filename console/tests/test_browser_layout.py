"""The console at a laptop's width (1366x900) and a phone's (390x844), in Debian's Chromium.

What the operator must see without scrolling sideways: each list's key columns
(status, when, last error), a destination whose deliveries all end DEAD shown
as failing (never "Healthy"), the landing page's "needs attention", and no
action that spends an occurrence without a page asking first.
"""

from __future__ import annotations

import os
from datetime import time, timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from console import dashboard
from console.tests.console_data import dead_at, delivered_at, populate_demo
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from scheduling.models import Event, EventStatus
from users.tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PASSWORD = "Browser-pass-2026!"
LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
# SCREENSHOTS_DIR=docs/screenshots refreshes the copies the docs show (docs/operations.md).
SCREENSHOTS_DIR = os.environ.get("SCREENSHOTS_DIR")
# A receiver's connection error as aiohttp words it: long, and without spaces to break at.
LONG_ERROR = "Connection error: Cannot connect to host crm-broken.internal.example.org:443 ssl:default [Connect call failed ('10.20.30.40', 443)]"

# Each list and the columns an operator must see at a laptop's width.
KEY_COLUMNS = {
    "admin:delivery_delivery_changelist": ["status_badge", "last_status_code", "last_error_short", "when"],
    "admin:scheduling_event_changelist": ["status_badge", "target_utc", "lateness"],
    "admin:users_user_changelist": ["name", "next_birthday_utc", "next_status", "greetings"],
    "admin:delivery_destination_changelist": ["condition", "dead_counts", "last_failure", "last_delivered"],
}


@pytest.fixture
def sized(browser):
    contexts = []

    def open_page(viewport: dict):
        context = browser.new_context(viewport=viewport, device_scale_factor=1)
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def log_in(page, live_server, *, username: str = "ops-alice") -> None:
    page.goto(live_server.url + reverse("admin:login"))
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(live_server.url + reverse("admin:index"))


def console_data(django_user_model) -> dict:
    """The demo console, and three destinations: one whose every delivery ended DEAD (HTTP 400), one whose
    receiver cannot be reached, one that delivers."""
    demo = populate_demo()
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    make = lambda name: destination_create(  # noqa: E731
        settings=DestinationSettings(
            name=name, url=f"https://{name}.hooks.example.org/webhooks/birthday-greetings/v1"
        ),
        operator="ops",
    ).destination
    broken, unreachable, fine = make("crm-broken"), make("crm-unreachable"), make("crm-fine")
    now = timezone.now()
    for minutes in range(7):
        dead_at(
            broken, status_code=400, error="Bad Request", finished_at=now - timedelta(minutes=4 + 9 * minutes)
        )
    for minutes in range(3):
        dead_at(
            unreachable, status_code=None, error=LONG_ERROR, finished_at=now - timedelta(minutes=20 + minutes)
        )
    delivered_at(fine, finished_at=now - timedelta(minutes=2))
    return {**demo, "broken": broken}


def clipped_columns(page, columns: list[str]) -> list[str]:
    """The columns whose header is not wholly in view: beyond the window, or scrolled out of the list's box."""
    return page.evaluate(
        """(columns) => columns.filter((name) => {
            const th = document.querySelector(`#result_list th.column-${name}`);
            if (!th) { return true; }
            const box = th.getBoundingClientRect();
            const list = th.closest(".results") || document.body;
            const visible = Math.min(window.innerWidth, list.getBoundingClientRect().right);
            return box.width === 0 || box.right > visible + 1;
        })""",
        columns,
    )


def page_scrolls_sideways(page) -> bool:
    return page.evaluate("document.scrollingElement.scrollWidth > window.innerWidth + 1")


def test_at_a_laptops_width_every_list_shows_its_key_columns(sized, live_server, django_user_model):
    console_data(django_user_model)
    page = sized(LAPTOP)
    log_in(page, live_server)

    for url_name, columns in KEY_COLUMNS.items():
        page.goto(live_server.url + reverse(url_name))
        assert page.locator("#result_list tbody tr").count() > 0, url_name
        assert clipped_columns(page, columns) == [], url_name
        assert not page_scrolls_sideways(page), url_name


def test_a_destination_with_only_dead_deliveries_is_failing_on_every_page_at_both_widths(
    sized, live_server, django_user_model
):
    data = console_data(django_user_model)
    for viewport in (LAPTOP, PHONE):
        page = sized(viewport)
        log_in(page, live_server)

        # the landing page: first among what needs attention, its row not healthy
        attention = page.locator("#attention li").first.inner_text()
        assert "crm-broken" in attention and "Failing" in attention and "HTTP 400 Bad Request" in attention
        row = page.locator('#destination-health tr[data-destination="crm-broken"]')
        assert "Healthy" not in row.inner_text() and "Failing" in row.inner_text()

        # the destinations list and its page
        page.goto(live_server.url + reverse("admin:delivery_destination_changelist"))
        listed = page.locator("#result_list tr", has_text="crm-broken")
        assert "Failing" in listed.locator("td.field-condition").inner_text()
        assert "7" in listed.locator("td.field-dead_counts").inner_text()
        page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[data["broken"].pk]))
        condition = page.locator("#destination-condition").inner_text()
        assert "Failing" in condition and "Healthy" not in condition


def test_the_landing_page_and_the_failures_page_fit_a_phone(sized, live_server, django_user_model, tmp_path):
    console_data(django_user_model)
    page = sized(PHONE)
    log_in(page, live_server)

    assert not page_scrolls_sideways(page)
    assert page.locator("#attention").is_visible()
    # the pages' links read as words, not a letter a line
    link = page.locator("#user-tools a", has_text="Failures").bounding_box()
    assert link["width"] > link["height"]
    page.goto(live_server.url + reverse("admin:failures"))
    assert page.locator("tr.failure-group").count() >= 2
    assert not page_scrolls_sideways(page)
    screenshots = Path(SCREENSHOTS_DIR) if SCREENSHOTS_DIR else tmp_path
    screenshots.mkdir(parents=True, exist_ok=True)
    page.goto(live_server.url + reverse("admin:index"))
    page.screenshot(path=str(screenshots / "dashboard-phone.png"), full_page=True)


def test_screenshots_of_the_landing_page_and_the_failures_page(
    sized, live_server, django_user_model, tmp_path
):
    console_data(django_user_model)
    page = sized(LAPTOP)
    log_in(page, live_server)
    screenshots = Path(SCREENSHOTS_DIR) if SCREENSHOTS_DIR else tmp_path
    screenshots.mkdir(parents=True, exist_ok=True)

    page.screenshot(path=str(screenshots / "landing.png"), full_page=True)
    page.goto(live_server.url + reverse("admin:failures"))
    assert page.locator("tr.failure-group").count() >= 2
    page.screenshot(path=str(screenshots / "failures.png"), full_page=True)

    assert (screenshots / "landing.png").stat().st_size > 10_000
    assert (screenshots / "failures.png").stat().st_size > 10_000


def test_the_dashboard_refreshes_in_place_and_shows_a_new_failure(
    sized, live_server, django_user_model, monkeypatch
):
    monkeypatch.setattr(dashboard, "REFRESH_EVERY", 1)
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    crm = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/hook"), operator="ops"
    ).destination
    page = sized(LAPTOP)
    log_in(page, live_server)
    page.evaluate("window.notReloaded = true")
    assert "crm" not in page.locator("#attention").inner_text()

    # when a delivery to crm ends DEAD after the page was shown
    dead_at(crm, status_code=410, error="Gone")

    # then the page shows it within a refresh or two, without reloading
    page.locator("#attention li", has_text="crm").wait_for(timeout=10_000)
    assert "HTTP 410 Gone" in page.locator("#attention").inner_text()
    assert page.evaluate("window.notReloaded") is True


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1366x900", "390x844"])
def test_deliver_now_changes_no_occurrence_before_its_confirmation(
    sized, live_server, django_user_model, viewport
):
    # given today's birthday (sent at 23:30 in a zone where it is not yet 22:00) and tomorrow's
    from console.tests.test_events_admin import born_on

    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    today, tomorrow = born_on(days=0), born_on(days=1)
    before = {row["id"]: row for row in Event.objects.values()}
    page = sized(viewport)
    log_in(page, live_server)
    page.goto(live_server.url + reverse("admin:scheduling_event_changelist") + "?status__exact=PENDING")

    # when the operator picks "deliver now" for both and clicks Go
    for event in (today, tomorrow):
        page.check(f"input[name=_selected_action][value='{event.pk}']")
    page.select_option("select[name=action]", "deliver_now")
    page.click("button[name=index]")
    page.wait_for_load_state()

    # then a page says what will happen, to how many, and which is refused; nothing has changed
    assert "sent now instead of at its send time" in page.locator("#confirm-consequence").inner_text()
    assert "1 event" in page.locator("#confirm-count").inner_text()
    assert "not of today" in page.locator("#confirm-refused").inner_text()
    assert {row["id"]: row for row in Event.objects.values()} == before

    # "No, take me back" changes nothing either
    page.click("#confirm-no")
    page.wait_for_load_state()
    assert {row["id"]: row for row in Event.objects.values()} == before

    # confirmed, only today's occurrence is due now; tomorrow's keeps its day and time
    for event in (today, tomorrow):
        page.check(f"input[name=_selected_action][value='{event.pk}']")
    page.select_option("select[name=action]", "deliver_now")
    page.click("button[name=index]")
    page.click("#confirm-yes")
    page.wait_for_load_state()
    today.refresh_from_db()
    assert today.status == EventStatus.PENDING and today.target_timestamp_utc <= timezone.now()
    assert Event.objects.values().get(pk=tomorrow.pk) == before[tomorrow.pk]
    assert today.occurrence_date == before[today.pk]["occurrence_date"]
    assert UserFactory._meta.model.objects.get(pk=today.user_id).send_time == time(23, 30)
