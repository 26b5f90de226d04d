"""Optimistic concurrency: ETag and If-Match on recipients, and updates that never lose each other's changes."""

import pytest

from users.models import User
from users.services import user_update
from users.tests.factories import UserFactory

USERS_URL = "/api/v1/users/"

pytestmark = pytest.mark.django_db


def detail_url(user) -> str:
    return f"{USERS_URL}{user.id}/"


def test_get_put_patch_and_post_send_the_version_as_etag(api_client):
    created = api_client.post(
        USERS_URL,
        {"first_name": "Ada", "last_name": "Lovelace", "date_of_birth": "1990-05-05", "timezone": "UTC"},
        format="json",
    )
    assert created["ETag"] == '"1"' and created.json()["version"] == 1
    url = f"{USERS_URL}{created.json()['id']}/"

    assert api_client.get(url)["ETag"] == '"1"'
    patched = api_client.patch(url, {"first_name": "Grace"}, format="json")
    assert patched["ETag"] == '"2"' and patched.json()["version"] == 2
    replaced = api_client.put(
        url,
        {"first_name": "Grace", "last_name": "Hopper", "date_of_birth": "1990-05-05", "timezone": "UTC"},
        format="json",
    )
    assert replaced["ETag"] == '"3"'


def test_a_patch_that_changes_nothing_keeps_the_version(api_client):
    user = UserFactory(first_name="Ada")

    response = api_client.patch(detail_url(user), {"first_name": "Ada"}, format="json")

    assert response.status_code == 200
    assert response["ETag"] == '"1"'


@pytest.mark.parametrize("if_match", ['"1"', '"7", "1"', "*", ' "1" '])
def test_patch_with_a_matching_if_match_is_applied(api_client, if_match):
    user = UserFactory(first_name="Ada")

    response = api_client.patch(
        detail_url(user), {"first_name": "Grace"}, format="json", HTTP_IF_MATCH=if_match
    )

    assert response.status_code == 200, response.content
    user.refresh_from_db()
    assert (user.first_name, user.version) == ("Grace", 2)


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
@pytest.mark.parametrize("if_match", ['"1"', 'W/"2"', '"2x"'])
def test_a_stale_or_foreign_if_match_is_refused_with_412_and_changes_nothing(api_client, method, if_match):
    # given a recipient someone else changed since version 1
    user = UserFactory(first_name="Ada", timezone="UTC")
    user_update(user=user, data={"last_name": "Byron"})
    payload = {
        "first_name": "Grace",
        "last_name": "Hopper",
        "date_of_birth": "1990-05-05",
        "timezone": "Asia/Tokyo",
    }

    response = getattr(api_client, method)(detail_url(user), payload, format="json", HTTP_IF_MATCH=if_match)

    assert response.status_code == 412, response.content
    assert '"2"' in response.json()["detail"]
    stored = User.objects.get(pk=user.pk)
    assert (stored.first_name, stored.last_name, stored.timezone, stored.version) == (
        "Ada",
        "Byron",
        "UTC",
        2,
    )


def test_delete_with_the_current_version_deletes(api_client):
    user = UserFactory()

    response = api_client.delete(detail_url(user), HTTP_IF_MATCH='"1"')

    assert response.status_code == 204
    assert not User.objects.filter(pk=user.pk).exists()


@pytest.mark.parametrize("if_match", ["1", '"1', "garbage", '"1" "2"'])
def test_a_malformed_if_match_is_a_400(api_client, if_match):
    user = UserFactory(first_name="Ada")

    response = api_client.patch(
        detail_url(user), {"first_name": "Grace"}, format="json", HTTP_IF_MATCH=if_match
    )

    assert response.status_code == 400
    assert "If-Match" in response.json()["detail"]
    user.refresh_from_db()
    assert user.first_name == "Ada"


def test_an_update_from_a_stale_copy_writes_only_the_fields_it_changes():
    # given two copies read before either update
    user = UserFactory(first_name="Ada", timezone="UTC")
    first_copy, second_copy = User.objects.get(pk=user.pk), User.objects.get(pk=user.pk)

    # when each applies a different field
    user_update(user=first_copy, data={"first_name": "Name0"})
    user_update(user=second_copy, data={"timezone": "Asia/Tokyo"})

    # then both changes stand
    stored = User.objects.get(pk=user.pk)
    assert (stored.first_name, stored.timezone, stored.version) == ("Name0", "Asia/Tokyo", 3)
