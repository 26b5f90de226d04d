"""The upcoming page in Debian's Chromium at a laptop's width (1366x900) and a phone's (390x844): the right
people, at the right local times, for three destinations (a digest at 09:30 Berlin, one message each at the
recipient's 09:00 in Los Angeles, and a channel for one team's people)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console.tests.test_browser_layout import (  # noqa: F401
    LAPTOP,
    PASSWORD,
    PHONE,
    SCREENSHOTS_DIR,
    log_in,
    sized,
)
from delivery.upcoming.tests.helpers import born, destination, digest_destination, in_days

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["1366x900", "390x844"])
def test_the_upcoming_page_names_the_right_people_at_their_local_times(
    sized,  # noqa: F811
    live_server,
    django_user_model,
    viewport,
):
    # given three destinations and four people
    digest_destination("berlin-digest", audience_labels=["office:berlin"])
    destination("la-messages", audience_labels=["office:la"])
    platform = destination("platform-channel", audience_labels=["team:platform"])
    born(2, first="Ada", labels=["office:berlin"], timezone="Europe/Berlin")
    born(3, first="Grace", last="Hopper", labels=["office:la"], timezone="America/Los_Angeles")
    born(
        4,
        first="Linus",
        last="Torvalds",
        labels=["office:la", "team:platform"],
        timezone="America/Los_Angeles",
    )
    born(5, first="Nobody", last="Here", labels=["office:paris"], timezone="Europe/Paris")
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
    page = sized(viewport)
    log_in(page, live_server)

    # when the operator opens the upcoming page
    page.goto(live_server.url + reverse("admin:upcoming"))

    # then each person is under their day, at each destination's local time, UTC on hover
    def row(name: str):
        return page.locator("tr.upcoming-row", has_text=name)

    ada = row("Ada Lovelace").locator(".upcoming-placement", has_text="berlin-digest")
    assert f"{in_days(2):%a %Y-%m-%d} 09:30 Europe/Berlin" in ada.inner_text()
    assert "UTC" in ada.locator("time").get_attribute("title")
    grace = row("Grace Hopper").locator(".upcoming-placement", has_text="la-messages")
    assert f"{in_days(3):%a %Y-%m-%d} 09:00 America/Los_Angeles" in grace.inner_text()
    linus = row("Linus Torvalds")
    assert (
        f"{in_days(4):%a %Y-%m-%d} 09:00 America/Los_Angeles"
        in linus.locator(".upcoming-placement", has_text="platform-channel").inner_text()
    )
    assert linus.locator(".upcoming-placement").count() == 2
    assert "Not in the audience" in row("Nobody Here").inner_text()
    assert (
        page.locator(f'tbody.upcoming-day[data-date="{in_days(3).isoformat()}"]')
        .inner_text()
        .count("Grace Hopper")
        == 1
    )
    if SCREENSHOTS_DIR:
        page.screenshot(path=f"{SCREENSHOTS_DIR}/upcoming-{viewport['width']}.png", full_page=True)
    # and nothing is wider than the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"] + 1

    # filtered by the audience's destination, only its people
    page.select_option("#upcoming-filters select[name=destination]", str(platform.pk))
    page.click("#upcoming-filters input[type=submit]")
    page.wait_for_load_state()
    assert page.locator("tr.upcoming-row").all_inner_texts() and all(
        "Linus Torvalds" in text for text in page.locator("tr.upcoming-row").all_inner_texts()
    )
