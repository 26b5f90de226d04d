"""The console's upcoming page, a destination's coming digests and calendar feed, a recipient's next greetings."""

import re

import pytest
from django.urls import reverse

from delivery.models import CalendarFeed
from delivery.upcoming.tests.helpers import born, destination, digest_destination, in_days

pytestmark = pytest.mark.django_db


def test_the_page_lists_each_day_with_who_where_and_when_and_why_not(console):
    born(2, first="Ada", labels=["team:platform"])
    born(3, first="Grace", last="Hopper", labels=["team:data"], language="de")
    destination("platform", audience_labels=["team:platform"])
    destination("data", audience_labels=["team:data"])
    digest_destination("everyone")

    page = console.get(reverse("admin:upcoming")).content.decode()

    assert page.index("Ada Lovelace") < page.index("Grace Hopper")
    assert f'data-date="{in_days(2).isoformat()}"' in page
    assert "Digest of" in page and "Europe/Berlin" in page
    assert "no template in de, so the default is used" in page
    filtered = console.get(reverse("admin:upcoming"), {"label": "team:data"}).content.decode()
    assert "Grace Hopper" in filtered and "Ada Lovelace" not in filtered


def test_a_bad_filter_is_said_and_the_page_still_answers(console):
    response = console.get(reverse("admin:upcoming"), {"days": "999", "label": "team platform", "type": "X"})

    assert response.status_code == 200
    page = response.content.decode()
    assert "Days: from 1 to 366" in page and "Label:" in page and "Type:" in page


def test_a_destinations_page_shows_its_coming_digests_with_their_names(console):
    born(1, first="Ada")
    digest = digest_destination("everyone")

    page = console.get(reverse("admin:delivery_destination_change", args=[digest.pk])).content.decode()

    assert "Ada Lovelace&#x27;s birthday" in page or "Ada Lovelace's birthday" in page
    assert "09:30" in page


def test_a_recipients_page_says_where_when_and_in_which_words_they_will_next_be_greeted(console):
    ada = born(5, first="Ada", language="de")
    destination("chat")

    page = console.get(reverse("admin:users_user_change", args=[ada.pk])).content.decode()

    assert "field-where_and_when" in page
    assert re.search(r"Message:.*chat", page)
    assert "no template in de, so the default is used" in page


def test_issuing_a_calendar_feed_shows_its_address_once_and_revoking_it_ends_it(console, client):
    chat = destination("chat")
    url = reverse("admin:delivery_destination_calendar_feed", args=[chat.pk])

    shown = console.post(url, {"action": "issue"})
    address = re.search(
        r'id="calendar-feed-url" readonly size="100" value="([^"]+)"', shown.content.decode()
    )[1]
    assert shown["Cache-Control"].startswith("max-age=0")
    assert client.get(address).status_code == 200
    page = console.get(reverse("admin:delivery_destination_change", args=[chat.pk])).content.decode()
    assert address not in page and "Issued by ops-alice" in page

    console.post(url, {"action": "revoke"})

    assert client.get(address).status_code == 404
    assert not CalendarFeed.objects.exists()
