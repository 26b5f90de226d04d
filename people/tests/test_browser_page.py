"""The person's own page in Debian's Chromium, at a phone's width (390x844) and a laptop's (1366x900), in
English and German: the choices made by ticking boxes, the links that open nothing, a form without its token."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from freezegun import freeze_time

from config.throttling import PersonalPageThrottle
from delivery.actions.optouts import destination_opt_outs_of
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from scheduling.celebration import ChangedBy
from users import services
from users.models import CelebrationChoice, User
from users.tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}
SAVED = {"en": "Saved.", "de": "Gespeichert."}
HEADING = {"en": "Where and when you will be greeted", "de": "Wo und wann Ihnen gratuliert wird"}


@pytest.fixture(autouse=True)
def unthrottled(monkeypatch):
    # The live server shares this process: the tests' own requests are not what is measured here.
    monkeypatch.setattr(
        PersonalPageThrottle,
        "THROTTLE_RATES",
        {**PersonalPageThrottle.THROTTLE_RATES, "personal_page": "10000/minute"},
    )


@pytest.fixture
def sized(browser):
    contexts = []

    def open_page(viewport: dict):
        context = browser.new_context(viewport=viewport, device_scale_factor=1, java_script_enabled=True)
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def link_of(user: User, live_server) -> str:
    url = services.personal_link_issue(user_id=user.pk, issued_by=ChangedBy.OPERATOR, actor="ops").url
    return live_server.url + url.removeprefix("http://127.0.0.1:8000")


def scrolls_sideways(page) -> bool:
    return page.evaluate("document.scrollingElement.scrollWidth > window.innerWidth + 1")


def channels():
    general = destination_create(
        settings=DestinationSettings(name="#general", url="https://general.example.org/hook"), operator="ops"
    ).destination
    platform = destination_create(
        settings=DestinationSettings(
            name="#platform", url="https://platform.example.org/hook", audience_labels=["team:platform"]
        ),
        operator="ops",
    ).destination
    return general, platform


@pytest.mark.parametrize("language", ["en", "de"])
@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_a_person_changes_visibility_leaves_one_channel_and_hides_their_age(
    sized, live_server, viewport, language
):
    general, platform = channels()
    ada = UserFactory(
        first_name="Ada",
        date_of_birth=date(1990, 6, 15),
        timezone="Europe/Berlin",
        labels=["team:platform"],
        language=language,
        anniversary_date=date(2015, 9, 1),
    )
    page = sized(viewport)

    page.goto(link_of(ada, live_server))

    assert page.locator("h2#greetings-title").inner_text() == HEADING[language]
    assert page.locator("li[data-destination='#general']").count() >= 1
    assert not scrolls_sideways(page)
    page.check("input[name=visibility_ANNIVERSARY][value=none]")
    page.uncheck(f"input[name=announce][value='{general.id}']")
    page.check("input[name=hide_age]")
    page.click("button[type=submit]")

    page.wait_for_selector("p.saved")
    assert page.locator("p.saved").inner_text().startswith(SAVED[language])
    assert not scrolls_sideways(page)
    ada.refresh_from_db()
    assert ada.hide_age is True
    assert CelebrationChoice.objects.get(user=ada, event_type="ANNIVERSARY").visibility == "none"
    assert not CelebrationChoice.objects.filter(user=ada, event_type="BIRTHDAY").exists()
    assert destination_opt_outs_of(user_id=ada.pk) == {general.id}
    # What the page now says: #general will not name them, #platform still will.
    assert page.is_checked(f"input[name=announce][value='{platform.id}']")
    assert not page.is_checked(f"input[name=announce][value='{general.id}']")
    assert page.is_checked("input[name=hide_age]")


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["phone", "laptop"])
def test_expired_and_revoked_links_get_the_same_404_as_a_random_one(sized, live_server, viewport):
    ada = UserFactory()
    with freeze_time(date.today() - timedelta(days=31)):
        expired = link_of(UserFactory(), live_server)
    revoked = link_of(ada, live_server)
    current = link_of(ada, live_server)
    page = sized(viewport)

    answers = []
    for url in (live_server.url + "/p/me/a-random-token/", expired, revoked):
        response = page.goto(url)
        headers = {k: v for k, v in response.all_headers().items() if k != "date"}
        answers.append((response.status, page.content(), headers))

    assert answers[0][0] == 404
    assert answers[1] == answers[0]
    assert answers[2] == answers[0]
    assert answers[0][2]["cache-control"] == "no-store"
    assert page.goto(current).status == 200


def test_a_form_posted_without_its_csrf_token_changes_nothing(sized, live_server):
    ada = UserFactory()
    page = sized(PHONE)
    page.goto(link_of(ada, live_server))

    page.evaluate("document.querySelector('input[name=csrfmiddlewaretoken]').remove()")
    page.check("input[name=hide_age]")
    with page.expect_navigation() as posted:
        page.click("button[type=submit]")

    assert posted.value.status == 403
    ada.refresh_from_db()
    assert ada.hide_age is False


@pytest.mark.parametrize("language", ["en", "de"])
def test_a_name_of_one_long_word_wraps_on_a_phone(sized, live_server, language):
    # The heading greets the person by name: an 80-letter name with no space once pushed the page
    # sideways at 390 px while the cards below stayed narrow.
    person = UserFactory(first_name="Zoë<!channel>" + "A" * 80, last_name="<b>Ünal</b>", language=language)
    page = sized(PHONE)

    page.goto(link_of(person, live_server))

    assert "Zoë<!channel>" in page.locator("h1").inner_text()
    assert not scrolls_sideways(page)
