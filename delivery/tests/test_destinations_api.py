"""The destinations API: /api/v1/destinations/, operators only; a secret in the create and rotate answers only."""

import json
import logging

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from conftest import permissions_named
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationSecret, Endpoint, EndpointState
from delivery.scheduler import Scheduler
from delivery.services.destinations import destination_url_fields
from delivery.tests.conftest import key_of, make_due
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/destinations/"
NEW = {
    "name": "team-slack",
    "url": "https://hooks.example.org/slack",
    "event_types": ["BIRTHDAY"],
    "format": "slack",
}


def create(api_client, **fields) -> dict:
    response = api_client.post(URL, {**NEW, **fields}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def test_create_answers_the_destination_with_its_secret_this_once(api_client):
    body = create(api_client, max_rate=1, timeout=2.5)

    destination = Destination.objects.get()
    assert body["secret"].startswith("whsec_")
    assert body["secrets"] == [
        {
            "hint": body["secret"][:10] + "…",
            "created_at": body["secrets"][0]["created_at"],
            "expires_at": None,
        }
    ]
    assert (body["name"], body["format"], body["event_types"], body["timeout"], body["max_rate"]) == (
        "team-slack",
        "slack",
        ["BIRTHDAY"],
        2.5,
        1.0,
    )
    assert (body["created_by"], body["paused"], body["endpoint_state"]) == ("operator", False, "HEALTHY")
    assert destination.created_by == "operator"


def test_the_secret_never_appears_again_in_any_answer_or_log_line(api_client, caplog):
    caplog.set_level(logging.DEBUG)
    created = create(api_client)
    secret, key = created["secret"], created["secret"].removeprefix("whsec_")
    rotated = api_client.post(f"{URL}{created['id']}/rotate-secret/", {}, format="json").json()

    answers = [
        api_client.get(URL),
        api_client.get(f"{URL}{created['id']}/"),
        api_client.patch(f"{URL}{created['id']}/", {"enabled": False}, format="json"),
        api_client.put(f"{URL}{created['id']}/", NEW, format="json"),
        api_client.post(f"{URL}{created['id']}/pause/"),
        api_client.post(f"{URL}{created['id']}/resume/"),
    ]

    for response in answers:
        assert response.status_code == 200, response.content
        text = response.content.decode()
        assert key not in text and rotated["secret"].removeprefix("whsec_") not in text
    assert secret not in caplog.text and key not in caplog.text
    assert rotated["secret"].removeprefix("whsec_") not in caplog.text


def test_a_supplied_secret_is_used_and_a_bad_one_refused_naming_it(api_client):
    supplied = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

    assert create(api_client, secret=supplied)["secret"] == supplied
    response = api_client.post(
        URL, {**NEW, "name": "other", "url": "https://o.example.org/", "secret": "nope"}, format="json"
    )

    assert response.status_code == 400
    assert set(response.json()) == {"secret"}
    assert "nope" not in response.content.decode()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"url": "ftp://files.example.org/x"}, "url"),
        ({"url": "https://" + "a" * 2000 + ".org/"}, "url"),
        ({"event_types": ["GRADUATION"]}, "event_types"),
        ({"event_types": "BIRTHDAY"}, "event_types"),
        ({"event_types": [{}]}, "event_types"),
        ({"format": "telegram"}, "format"),
        ({"timeout": 600}, "timeout"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"max_rate": -1}, "max_rate"),
        ({"name": ""}, "name"),
        ({"colour": "blue"}, "colour"),
        ({"created_by": "mallory"}, "created_by"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_creates_nothing(api_client, fields, field):
    response = api_client.post(URL, {**NEW, **fields}, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert all(isinstance(message, str) for message in response.json()[field])
    assert not Destination.objects.exists()


def test_a_taken_name_is_400_and_the_first_destination_is_unchanged(api_client):
    create(api_client)

    response = api_client.post(URL, {**NEW, "url": "https://other.example.org/"}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"name"}
    assert Destination.objects.count() == 1


def test_a_secret_is_not_changed_by_an_edit(api_client):
    created = create(api_client)

    response = api_client.patch(f"{URL}{created['id']}/", {"secret": created["secret"]}, format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"secret"}


def test_an_edit_answers_the_new_settings_and_says_who_made_it(api_client):
    created = create(api_client)

    response = api_client.patch(f"{URL}{created['id']}/", {"event_types": [], "timeout": None}, format="json")

    assert response.status_code == 200
    assert (response.json()["event_types"], response.json()["updated_by"]) == ([], "operator")
    assert Destination.objects.get().event_types == []


def test_an_edit_with_a_stale_if_match_is_412_and_changes_nothing(api_client):
    created = create(api_client)
    etag = api_client.get(f"{URL}{created['id']}/")["ETag"]
    api_client.patch(f"{URL}{created['id']}/", {"enabled": False}, format="json", HTTP_IF_MATCH=etag)

    stale = api_client.patch(f"{URL}{created['id']}/", {"name": "mine"}, format="json", HTTP_IF_MATCH=etag)
    stale_delete = api_client.delete(f"{URL}{created['id']}/", HTTP_IF_MATCH=etag)

    assert etag == '"1"'
    assert (stale.status_code, stale_delete.status_code) == (412, 412)
    assert Destination.objects.get().name == "team-slack"
    assert api_client.get(f"{URL}{created['id']}/")["ETag"] == '"2"'


def test_rotation_answers_the_new_secret_and_lists_both_while_the_old_one_still_signs(api_client):
    created = create(api_client)

    response = api_client.post(f"{URL}{created['id']}/rotate-secret/", {}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert body["secret"] != created["secret"]
    assert [s["hint"] for s in body["secrets"]] == [body["secret"][:10] + "…", created["secret"][:10] + "…"]
    assert body["secrets"][0]["expires_at"] is None and body["secrets"][1]["expires_at"] is not None
    assert DestinationSecret.objects.count() == 2


def test_pause_and_resume_are_the_endpoints_and_a_second_pause_is_409(api_client):
    created = create(api_client)

    paused = api_client.post(f"{URL}{created['id']}/pause/")
    again = api_client.post(f"{URL}{created['id']}/pause/")
    resumed = api_client.post(f"{URL}{created['id']}/resume/")

    assert (paused.status_code, paused.json()["paused"], paused.json()["endpoint_state"]) == (
        200,
        True,
        "PAUSED",
    )
    assert again.status_code == 409
    assert (resumed.status_code, resumed.json()["paused"]) == (200, False)
    assert Endpoint.objects.get(key=key_of(NEW["url"])).state == EndpointState.HEALTHY


def test_deleting_a_destination_with_deliveries_to_send_is_409_and_deletes_nothing(api_client):
    created = create(api_client, event_types=[])
    make_due([UserFactory().events.get()])
    Scheduler(once=True).run()

    refused = api_client.delete(f"{URL}{created['id']}/")
    Delivery.objects.update(status=DeliveryStatus.DELIVERED)
    deleted = api_client.delete(f"{URL}{created['id']}/")

    assert refused.status_code == 409
    assert "disable it" in refused.json()["detail"]
    assert deleted.status_code == 204
    assert not Destination.objects.exists() and Delivery.objects.count() == 1


def test_without_credentials_it_is_401_and_without_the_permission_403(anonymous_client, django_user_model):
    clerk = django_user_model.objects.create_user(username="clerk", password="s3cret-pass!")
    clerk.user_permissions.set(permissions_named("users.view_user", "delivery.view_destination"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=clerk).key}")

    assert anonymous_client.get(URL).status_code == 401
    assert client.get(URL).status_code == 200
    assert client.post(URL, NEW, format="json").status_code == 403
    destination = Destination.objects.create(name="x", **destination_url_fields(url="https://x.example.org/"))
    assert client.post(f"{URL}{destination.pk}/pause/").status_code == 403
    assert client.post(f"{URL}{destination.pk}/rotate-secret/", {}, format="json").status_code == 403
    assert client.delete(f"{URL}{destination.pk}/").status_code == 403
    recipients_only = get_user_model().objects.create_user(username="hr", password="s3cret-pass!")
    recipients_only.user_permissions.set(permissions_named("users.view_user"))
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=recipients_only).key}")
    assert client.get(URL).status_code == 403


def test_the_openapi_description_has_every_destination_operation(client):
    schema = json.loads(client.get("/api/v1/schema/?format=json").content)

    paths = schema["paths"]
    assert set(paths[URL]) >= {"get", "post"}
    assert set(paths[URL + "{id}/"]) >= {"get", "put", "patch", "delete"}
    assert {URL + "{id}/rotate-secret/", URL + "{id}/pause/", URL + "{id}/resume/"} <= set(paths)
