"""The destinations API: /api/v1/destinations/, operators only; a secret in the create and rotate answers only."""

import base64
import json
import logging

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from conftest import permissions_named
from delivery.destinations.services import destination_url_fields
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationSecret, Endpoint, EndpointState
from delivery.tests.pipeline import key_of, make_due
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


def create_signed(api_client, **fields) -> dict:
    """A standard destination: the kind that is signed (a chat kind gets no secret)."""
    return create(api_client, **{"format": "standard", **fields})


def test_a_chat_destination_gets_no_signing_secret_and_one_given_is_refused(api_client):
    body = create(api_client)
    refused = api_client.post(
        URL,
        {**NEW, "name": "o", "url": "https://o.example.org/", "secret": "whsec_" + "A" * 32},
        format="json",
    )

    assert "secret" not in body and body["secrets"] == []
    assert not DestinationSecret.objects.exists()
    assert refused.status_code == 400
    assert refused.json()["secret"] == [
        "A Slack destination is not signed: its service checks no signature, and its webhook URL is its "
        "credential."
    ]


def test_a_chat_destination_turned_standard_needs_a_secret_first(api_client):
    created = create(api_client)

    refused = api_client.patch(f"{URL}{created['id']}/", {"format": "standard"}, format="json")
    api_client.post(f"{URL}{created['id']}/rotate-secret/", {}, format="json")
    turned = api_client.patch(f"{URL}{created['id']}/", {"format": "standard"}, format="json")

    assert refused.status_code == 400 and "rotate-secret gives it one" in refused.json()["format"][0]
    assert turned.status_code == 200 and turned.json()["format"] == "standard"


def test_create_answers_the_destination_with_its_secret_this_once(api_client):
    body = create_signed(api_client, max_rate=1, timeout=2.5)

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
        "standard",
        ["BIRTHDAY"],
        2.5,
        1.0,
    )
    assert (body["created_by"], body["paused"], body["endpoint_state"]) == ("operator", False, "HEALTHY")
    assert destination.created_by == "operator"


def test_the_secret_never_appears_again_in_any_answer_or_log_line(api_client, caplog):
    caplog.set_level(logging.DEBUG)
    created = create_signed(api_client)
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

    assert create_signed(api_client, secret=supplied)["secret"] == supplied
    response = api_client.post(
        URL,
        {**NEW, "format": "standard", "name": "other", "url": "https://o.example.org/", "secret": "nope"},
        format="json",
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
    created = create_signed(api_client)

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
    created = create_signed(api_client)

    response = api_client.post(f"{URL}{created['id']}/rotate-secret/", {}, format="json")

    assert response.status_code == 200
    body = response.json()
    assert body["secret"] != created["secret"]
    assert [s["hint"] for s in body["secrets"]] == [body["secret"][:10] + "…", created["secret"][:10] + "…"]
    assert body["secrets"][0]["expires_at"] is None and body["secrets"][1]["expires_at"] is not None
    assert DestinationSecret.objects.count() == 2


@pytest.mark.parametrize("which", ["in force", "in its grace period"])
def test_rotating_to_a_secret_that_signs_already_is_400_and_changes_nothing(api_client, which):
    # Given a destination whose secret was rotated once: the first still signs for the grace period
    created = create_signed(api_client)
    rotated = api_client.post(f"{URL}{created['id']}/rotate-secret/", {}, format="json").json()
    same = rotated["secret"] if which == "in force" else created["secret"]
    before = list(DestinationSecret.objects.order_by("id").values_list("id", "expires_at"))

    # When it is rotated to one of those again
    response = api_client.post(f"{URL}{created['id']}/rotate-secret/", {"secret": same}, format="json")

    # Then it is refused, naming the field, and every secret stays as it was (no "v1,X v1,X" signature)
    assert response.status_code == 400
    assert "signs for this destination already" in response.json()["secret"][0]
    assert list(DestinationSecret.objects.order_by("id").values_list("id", "expires_at")) == before
    assert api_client.get(f"{URL}{created['id']}/")["ETag"] == '"2"'


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


# -- the receiver URL is a credential -------------------------------------------------------------------------

SLACK = "https://hooks.slack.com/services/T0001/B0001/XXXXSECRETTOKENXXXX"
TOKEN = "XXXXSECRETTOKENXXXX"


def viewer_client(django_user_model) -> APIClient:
    clerk = django_user_model.objects.create_user(username="viewer", password="s3cret-pass!")
    clerk.user_permissions.set(permissions_named("delivery.view_destination"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=clerk).key}")
    return client


def test_answers_show_the_url_redacted_and_reveal_url_shows_it_whole_to_who_may_change_it(
    api_client, django_user_model, caplog
):
    caplog.set_level(logging.DEBUG)
    created = create(api_client, url=SLACK)
    viewer = viewer_client(django_user_model)

    answers = [
        api_client.get(URL),
        api_client.get(f"{URL}{created['id']}/"),
        api_client.patch(f"{URL}{created['id']}/", {"enabled": False}, format="json"),
        viewer.get(URL),
        viewer.get(f"{URL}{created['id']}/"),
    ]
    revealed = api_client.post(f"{URL}{created['id']}/reveal-url/")
    refused = viewer.post(f"{URL}{created['id']}/reveal-url/")

    # all of the Slack URL but its token (kinds.slack)
    assert created["url"] == "https://hooks.slack.com/services/T0001/B0001/…"
    for response in answers:
        assert response.status_code == 200, response.content
        assert TOKEN not in response.content.decode()
        assert "https://hooks.slack.com/services/T0001/B0001/…" in response.content.decode()
    assert (revealed.status_code, revealed.json(), revealed["Cache-Control"]) == (
        200,
        {"url": SLACK},
        "no-store",
    )
    assert refused.status_code == 403 and TOKEN not in refused.content.decode()
    assert TOKEN not in caplog.text
    assert "Destination's receiver URL revealed to operator" in caplog.text
    stored = Destination.objects.values().get()
    assert not any(TOKEN in str(value) for value in stored.values())
    assert not any(TOKEN in str(value) for value in Endpoint.objects.values().get().values())


def test_a_put_of_what_get_answered_keeps_the_url(api_client):
    created = create(api_client, url=SLACK)
    shown = api_client.get(f"{URL}{created['id']}/").json()
    writable = {k: shown[k] for k in ("name", "url", "event_types", "format", "enabled", "max_rate")}

    response = api_client.put(f"{URL}{created['id']}/", {**writable, "enabled": False}, format="json")

    assert response.status_code == 200, response.content
    assert Destination.objects.get().receiver_url() == SLACK


@pytest.mark.parametrize(
    "url",
    ["http://user:pa55@hooks.example.org/slack", "https://user@hooks.example.org/slack"],
)
def test_a_url_with_a_user_or_password_is_400_naming_the_field_and_creates_nothing(api_client, url):
    response = api_client.post(URL, {**NEW, "url": url}, format="json")

    assert response.status_code == 400
    errors = response.json()["errors"] if "errors" in response.json() else response.json()
    assert "url" in json.dumps(errors) and "user name or password" in response.content.decode()
    assert "pa55" not in response.content.decode()
    assert not Destination.objects.exists() and not Endpoint.objects.exists()


@pytest.mark.parametrize(
    "spelling",
    [
        "HTTPS://HOOKS.EXAMPLE.ORG/slack",
        "https://hooks.example.org:443/slack",
        "https://hooks.example.org/slack#x",
        "  https://Hooks.Example.org:443/slack#frag ",
    ],
)
def test_another_spelling_of_a_destinations_url_is_400_one_receiver_one_destination(api_client, spelling):
    create(api_client)

    response = api_client.post(URL, {**NEW, "name": "again", "url": spelling}, format="json")

    assert response.status_code == 400
    assert "Another destination has this URL" in response.content.decode()
    assert Destination.objects.count() == Endpoint.objects.count() == 1


def test_a_differently_spelt_edit_of_the_same_url_moves_nothing(api_client):
    created = create(api_client)
    endpoint = Endpoint.objects.get()

    response = api_client.patch(
        f"{URL}{created['id']}/", {"url": "HTTPS://hooks.example.org:443/slack#top"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert list(Endpoint.objects.values_list("pk", flat=True)) == [endpoint.pk]
    assert Destination.objects.get().receiver_url() == NEW["url"]


def test_a_paused_destination_stays_paused_under_its_new_url_and_leaves_no_endpoint_behind(api_client):
    user = UserFactory()
    created = create(api_client, event_types=[])
    assert api_client.post(f"{URL}{created['id']}/pause/").status_code == 200
    make_due([user.events.get()])
    Scheduler(once=True).run()

    response = api_client.patch(
        f"{URL}{created['id']}/", {"url": "https://new.example.org/slack"}, format="json"
    )

    assert response.status_code == 200, response.content
    assert (response.json()["paused"], response.json()["endpoint_state"]) == (True, EndpointState.PAUSED)
    endpoint = Endpoint.objects.get()  # the old URL's is gone: no orphan left PAUSED
    assert endpoint.key == key_of("https://new.example.org/slack")
    assert (endpoint.state, endpoint.paused_by) == (EndpointState.PAUSED, "operator")
    assert list(Delivery.objects.values_list("status", "endpoint_key")) == [
        (DeliveryStatus.QUEUED, endpoint.key)
    ]
    assert api_client.post(f"{URL}{created['id']}/resume/").json()["paused"] is False


def test_a_gone_destination_given_a_new_url_leaves_gone_behind_and_its_old_receiver_raises_no_alert(
    api_client,
):
    # given a destination whose service said it is gone, with a delivery waiting
    user = UserFactory()
    created = create(api_client, event_types=[])
    make_due([user.events.get()])
    Scheduler(once=True).run()
    Endpoint.objects.update(state=EndpointState.GONE, last_error="HTTP 404 (no_team)")

    # when the operator gives it a new webhook's URL
    response = api_client.patch(
        f"{URL}{created['id']}/", {"url": "https://new.example.org/slack"}, format="json"
    )

    # then the new receiver starts healthy (GONE was the old one's verdict: not moved, unlike a pause),
    # the delivery waits for it, and nothing is left GONE to alert on (the old row went with the receiver)
    assert response.status_code == 200, response.content
    assert response.json()["endpoint_state"] == EndpointState.HEALTHY
    new_key = key_of("https://new.example.org/slack")
    assert dict(Endpoint.objects.values_list("key", "state")) == {new_key: EndpointState.HEALTHY}
    assert list(Delivery.objects.values_list("status", "endpoint_key")) == [(DeliveryStatus.QUEUED, new_key)]


def test_a_secret_with_white_space_around_it_is_refused_as_the_document_says_and_nothing_changes(api_client):
    created = create_signed(api_client)
    good = "whsec_" + base64.b64encode(b"k" * 32).decode()
    for given in (f" {good}", f"{good}\n", "\x0c\x0b"):
        refused = api_client.post(f"{URL}{created['id']}/rotate-secret/", {"secret": given}, format="json")
        assert refused.status_code == 400 and list(refused.json()) == ["secret"], refused.content
    assert api_client.get(f"{URL}{created['id']}/").json()["version"] == created["version"]
    assert (
        api_client.post(f"{URL}{created['id']}/rotate-secret/", {"secret": good}, format="json").status_code
        == 200
    )
