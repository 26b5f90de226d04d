"""Issue 47 in a real browser, at a laptop's width and a phone's: the next digest shown after a digest was sent
and its time moved back, the bulk label action, and a failure's hint.

Chromium comes from console/tests/conftest.py, the pages' sizes and the login from test_browser_layout.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from console.tests.console_data import dead_at
from console.tests.test_browser_layout import LAPTOP, PASSWORD, PHONE, log_in
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.digests import digests_build_due
from delivery.models import Destination, Digest
from scheduling.models import Event
from scheduling.times import load_timezone
from users.models import User
from users.services import user_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIEWPORTS = pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1366x900", "390x844"])
BERLIN = "Europe/Berlin"


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


def fits(page) -> bool:
    """Whether the page needs no sideways scrolling (a phone's width included)."""
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@VIEWPORTS
def test_after_the_days_digest_went_and_its_time_was_moved_later_the_next_digest_shown_is_tomorrows(
    sized, live_server, django_user_model, viewport
):
    # given a Berlin digest destination whose digest of today went out this morning (at the time it had then)
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    today = timezone.now().astimezone(load_timezone(BERLIN)).date()
    user_create(
        first_name="Ada",
        last_name="Lovelace",
        date_of_birth=date(1992, today.month, today.day),
        timezone=BERLIN,
    )
    # Today's occurrence, whatever the hour (after the catch-up window the first one would be next year's).
    Event.objects.update(occurrence_date=today)
    team = destination_create(
        settings=DestinationSettings(
            name="team", url="https://hooks.example.org/team", digest_time="00:00", digest_timezone=BERLIN
        ),
        operator="ops",
    ).destination
    Destination.objects.filter(pk=team.pk).update(next_digest_date=today, next_digest_at=timezone.now())
    assert digests_build_due(now=timezone.now()).queued == 1
    assert Digest.objects.get().local_date == today

    # when the operator sets its time later (23:59: later today, unless it is past that in Berlin)
    page = sized(viewport)
    log_in(page, live_server)
    page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[team.pk]))
    page.fill("#id_digest_time", "23:59")
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r".*/delivery/destination/$"))

    # then the next digest shown is tomorrow's, the one that will be sent, at its Berlin time, UTC on hover
    tomorrow = today + timedelta(days=1)
    due = datetime.combine(tomorrow, time(23, 59), tzinfo=load_timezone(BERLIN))
    page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[team.pk]))
    shown = page.locator(".field-next_digest time.bs-zoned")
    assert shown.inner_text() == f"{tomorrow:%a} {tomorrow.isoformat()} 23:59 Europe/Berlin"
    assert shown.get_attribute("title") == f"{due.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    assert today.isoformat() not in page.locator(".field-next_digest").inner_text()
    assert fits(page)


@VIEWPORTS
def test_an_operator_adds_a_label_to_the_selected_recipients_told_to_how_many_first(
    sized, live_server, django_user_model, viewport
):
    # given three recipients, one of whom holds the label already
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    people = [
        user_create(
            first_name=name, last_name="Doe", date_of_birth=date(1990, 3, 8), timezone="UTC", labels=labels
        )
        for name, labels in (("Ada", []), ("Bob", ["team:platform"]), ("Cy", ["remote"]))
    ]
    page = sized(viewport)
    log_in(page, live_server)
    page.goto(live_server.url + reverse("admin:users_user_changelist"))

    # when the operator selects all three, types the label and picks the action
    for person in people:
        page.check(f"input[name=_selected_action][value='{person.pk}']")
    page.fill(".actions input[name=label]", "Team:Platform")
    page.select_option("select[name=action]", "add_label")
    page.click("button[name=index]")
    page.wait_for_load_state()

    # then a page says to how many before anything changes
    assert "2 recipients" in page.locator("#confirm-count").inner_text()
    assert "Bob Doe: already holds it" in page.locator("#confirm-refused").inner_text()
    assert [User.objects.get(pk=p.pk).labels for p in people] == [[], ["team:platform"], ["remote"]]
    assert fits(page)

    # and confirmed, the two get it
    page.click("#confirm-yes")
    page.wait_for_load_state()
    assert "Added the label team:platform to 2 recipient(s)" in page.locator(".messagelist").inner_text()
    assert [User.objects.get(pk=p.pk).labels for p in people] == [
        ["team:platform"],
        ["team:platform"],
        ["remote", "team:platform"],
    ]


@VIEWPORTS
def test_a_failure_says_what_it_means_and_what_fixes_it(sized, live_server, django_user_model, viewport):
    # given a Slack destination whose webhook was deleted (404) and a receiver that redirects (301)
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    slack = destination_create(
        settings=DestinationSettings(
            name="slack", url="https://hooks.slack.com/services/T0/B0/x", format="slack"
        ),
        operator="ops",
    ).destination
    crm = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/hook"), operator="ops"
    ).destination
    dead_at(slack, status_code=404, error="no_service")
    moved = dead_at(crm, status_code=301, error="Moved Permanently")
    page = sized(viewport)
    log_in(page, live_server)

    # the failures page says, for each cause, what it means and what fixes it
    page.goto(live_server.url + reverse("admin:failures"))
    slack_row = page.locator(".failure-group", has_text="slack").inner_text()
    crm_row = page.locator(".failure-group", has_text="crm").inner_text()
    assert "the webhook no longer exists: it was deleted" in slack_row
    assert "Redirects are never followed" in crm_row
    assert fits(page)

    # and a dead delivery's page has no next attempt, and the same line
    page.goto(live_server.url + reverse("admin:delivery_delivery_change", args=[moved.pk]))
    assert (
        page.locator(".field-next_attempt").inner_text().endswith("None: it is dead (Resend queues it again)")
    )
    assert "Redirects are never followed" in page.locator(".field-what_to_do").inner_text()
    assert fits(page)
