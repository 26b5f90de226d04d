"""RFC 8058's one-click unsubscribe: a POST with no cookie and no CSRF token opts the person out, once.

A GET changes nothing (mail scanners follow links); a wrong token is a plain 404; every answer
carries the private headers; the page speaks the person's language.
"""

from datetime import date

import pytest
from django.test import Client

from delivery.actions.optouts import unsubscribe_token
from delivery.destinations.services import destination_url_fields
from delivery.models import Destination, DestinationOptOut
from people.responses import PRIVATE_HEADERS, page_language
from users.models import CelebrationChange
from users.services import user_create, user_erase

pytestmark = pytest.mark.django_db


@pytest.fixture
def pair():
    destination = Destination.objects.create(
        name="HR mail", **destination_url_fields(url="https://mail.example/hr")
    )
    person = user_create(
        first_name="Ada",
        last_name="Lovelace",
        date_of_birth=date(1990, 5, 5),
        timezone="UTC",
        language="de-AT",
    )
    return person, destination


def _url(person, destination) -> str:
    return f"/p/unsubscribe/{unsubscribe_token(user_id=person.pk, destination_id=destination.pk)}/"


def test_a_one_click_post_without_cookies_or_csrf_opts_out_and_a_second_changes_nothing(pair):
    person, destination = pair
    client = Client(enforce_csrf_checks=True)

    first = client.post(_url(*pair), {"List-Unsubscribe": "One-Click"})
    second = client.post(_url(*pair), {"List-Unsubscribe": "One-Click"})

    assert (first.status_code, second.status_code) == (200, 200)
    assert DestinationOptOut.objects.filter(user=person, destination=destination).count() == 1
    assert CelebrationChange.objects.filter(user=person, field="destination").count() == 1
    for name, value in PRIVATE_HEADERS.items():
        assert first[name] == value


def test_a_get_changes_nothing_and_offers_a_button_in_the_persons_language(pair):
    response = Client().get(_url(*pair))

    assert response.status_code == 200
    assert not DestinationOptOut.objects.exists()
    body = response.content.decode()
    assert '<html lang="de">' in body and 'method="post"' in body and "HR mail" in body
    assert response["Cache-Control"] == "no-store"


@pytest.mark.parametrize("token", ["nonsense", "a" * 80, "eyJ0ZXN0IjoxfQ:1abc:def"])
def test_a_wrong_token_is_the_same_plain_404_for_get_and_post(pair, token):
    get = Client().get(f"/p/unsubscribe/{token}/")
    post = Client().post(f"/p/unsubscribe/{token}/")

    assert get.status_code == post.status_code == 404
    assert get.content == post.content == b"Not found.\n"
    assert get["X-Robots-Tag"] == "noindex, nofollow" and get["Referrer-Policy"] == "no-referrer"
    assert not DestinationOptOut.objects.exists()


def test_an_erased_persons_link_is_the_same_404(pair):
    url = _url(*pair)
    user_erase(user=pair[0])

    response = Client().post(url)

    assert response.status_code == 404 and response.content == b"Not found.\n"


@pytest.mark.parametrize(
    ("language", "shown"), [("de", "de"), ("de-AT", "de"), ("en-GB", "en"), ("fr", "en"), ("", "en")]
)
def test_the_page_language_is_the_persons_or_its_base_else_english(language, shown):
    assert page_language(language) == shown
