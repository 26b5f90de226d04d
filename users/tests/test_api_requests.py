"""Requests at the edges of HTTP and JSON that black-box testing found answered with 500 or ignored."""

import pytest

from users.models import User
from users.tests.factories import UserFactory

USERS_URL = "/api/v1/users/"

pytestmark = pytest.mark.django_db


def stored() -> list[tuple]:
    return list(User.objects.order_by("id").values_list("id", "first_name", "timezone", "date_of_birth"))


@pytest.mark.parametrize("method", ["post", "put", "patch"])
@pytest.mark.parametrize("depth", [500, 1_000, 60_000])
def test_deeply_nested_json_is_refused_with_400_and_changes_nothing(api_client, method, depth):
    user = UserFactory()
    url = USERS_URL if method == "post" else f"{USERS_URL}{user.id}/"
    before = stored()

    response = getattr(api_client, method)(url, "[" * depth, content_type="application/json")

    assert response.status_code == 400, response.content
    assert "detail" in response.json()
    assert stored() == before


@pytest.mark.parametrize("suffix, content_type", [(".json", "application/json"), (".api", "text/html")])
def test_events_with_a_format_suffix_are_rendered_in_that_format(api_client, suffix, content_type):
    user = UserFactory()

    response = api_client.get(f"{USERS_URL}{user.id}/events{suffix}")

    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith(content_type)


@pytest.mark.parametrize("suffix", [".json", ".api"])
def test_events_with_a_format_suffix_for_an_unknown_id_is_404(api_client, suffix):
    response = api_client.get(f"{USERS_URL}00000000-0000-0000-0000-000000000000/events{suffix}")

    assert response.status_code == 404


@pytest.mark.parametrize("suffix", ["", ".json", ".api"])
def test_head_on_events_answers_like_get_without_a_body(api_client, suffix):
    user = UserFactory()

    response = api_client.head(f"{USERS_URL}{user.id}/events{suffix or '/'}")

    assert response.status_code == 200
    assert response.content == b""


@pytest.mark.parametrize("method", ["post", "patch", "put"])
def test_a_body_with_transfer_encoding_is_refused_with_411_and_changes_nothing(api_client, method):
    # WSGI hands Django a chunked body as zero bytes; this is what the view would see.
    user = UserFactory(first_name="Grace")
    url = USERS_URL if method == "post" else f"{USERS_URL}{user.id}/"
    before = stored()

    response = api_client.generic(
        method.upper(),
        url,
        b"",
        content_type="application/json",
        HTTP_TRANSFER_ENCODING="chunked",
        CONTENT_LENGTH="",
    )

    assert response.status_code == 411
    assert "Content-Length" in response.json()["detail"]
    assert stored() == before
