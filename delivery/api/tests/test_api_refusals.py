"""What the API refuses, and how it says so: a 400 naming the field in the words every door uses, never a 500.

Issue 47's defects: a port out of range, labels that are not strings or hold a space, a digest
time off the HH:MM rule, a UTC offset for a zone, a list's error by item, a bare token.
"""

import pytest

from delivery.destinations.services import destination_url_fields
from delivery.models import Destination, Recovery

pytestmark = pytest.mark.django_db

URL = "/api/v1/destinations/"
NEW = {"name": "team-hook", "url": "https://hooks.example.org/team"}
RECIPIENT = {
    "first_name": "Ada",
    "last_name": "Lovelace",
    "date_of_birth": "1990-12-10",
    "timezone": "Europe/London",
}


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/", "https://hooks.example.org:0/x"])
def test_a_port_out_of_range_is_a_400_naming_the_url_not_a_500(api_client, url):
    response = api_client.post(URL, {**NEW, "url": url}, format="json")

    assert response.status_code == 400, response.content
    assert response.json() == {
        "url": ["A port from 1 to 65535 (such as https://example.com:8443/), or none for the scheme's own."]
    }
    assert not Destination.objects.exists()


def test_a_port_out_of_range_on_an_edit_is_a_400_and_the_url_stays(api_client):
    created = api_client.post(URL, NEW, format="json").json()

    response = api_client.patch(
        f"{URL}{created['id']}/", {"url": "https://hooks.example.org:70000/"}, format="json"
    )

    assert response.status_code == 400 and list(response.json()) == ["url"]
    assert Destination.objects.get().url_display == created["url"]


@pytest.mark.parametrize("labels", [[1], [1.5], [True], [None], [["team"]]])
@pytest.mark.parametrize("field", ["audience_labels", "excluded_labels"])
def test_a_destinations_labels_that_are_not_strings_are_refused_as_a_recipients_are(
    api_client, field, labels
):
    destination = api_client.post(URL, {**NEW, field: labels}, format="json")
    recipient = api_client.post("/api/v1/users/", {**RECIPIENT, "labels": labels}, format="json")

    assert destination.status_code == recipient.status_code == 400, destination.content
    assert destination.json() == {field: recipient.json()["labels"]}
    assert not Destination.objects.exists()


def test_a_label_holding_a_space_is_refused_at_both_apis_saying_how_to_separate_labels(api_client):
    destination = api_client.post(URL, {**NEW, "audience_labels": ["team platform"]}, format="json")
    recipient = api_client.post("/api/v1/users/", {**RECIPIENT, "labels": ["team platform"]}, format="json")

    assert destination.status_code == recipient.status_code == 400
    [message] = destination.json()["audience_labels"]
    assert message == recipient.json()["labels"][0]
    assert "holds a space: separate labels with commas" in message


@pytest.mark.parametrize("given", ["9.30", "9:30", "09:30:00", "24:00", "9am", 930])
def test_a_digest_time_off_the_rule_gets_the_precise_message_a_send_time_gets(api_client, given):
    destination = api_client.post(
        URL, {**NEW, "digest_time": given, "digest_timezone": "Europe/Berlin"}, format="json"
    )
    recipient = api_client.post("/api/v1/users/", {**RECIPIENT, "send_time": given}, format="json")

    assert destination.status_code == 400, destination.content
    assert destination.json() == {
        "digest_time": [
            "Digest time must be a local time HH:MM from 00:00 to 23:59, such as 09:30, or empty for one "
            "message per greeting."
        ]
    }
    # The same rule in the same words, each naming its own field and its own empty value.
    assert recipient.json()["send_time"][0].startswith(
        "Send time must be a local time HH:MM from 00:00 to 23:59"
    )


def test_a_utc_offset_for_a_zone_suggests_zones_at_that_offset_not_kathmandu(api_client):
    response = api_client.post(
        URL, {**NEW, "digest_time": "09:30", "digest_timezone": "+05:00"}, format="json"
    )
    recipient = api_client.post("/api/v1/users/", {**RECIPIENT, "timezone": "+05:00"}, format="json")

    [message] = response.json()["digest_timezone"]
    assert "Kathmandu" not in message and "Kathmandu" not in recipient.json()["timezone"][0]
    assert "is a UTC offset, not a time zone" in message
    assert "one at +05:00 now, such as Asia/" in message


def test_a_recoverys_states_that_are_not_strings_say_item_1_as_every_list_field_does(api_client):
    destination = Destination.objects.create(
        name="crm", **destination_url_fields(url="https://crm.example.org/")
    )
    window = {"since": "2026-11-24T09:00:00+01:00", "until": "2026-11-25T11:00:00+01:00"}

    response = api_client.post(
        f"{URL}{destination.pk}/recoveries/", {"states": ["DEAD", {}], **window}, format="json"
    )
    event_types = api_client.post(URL, {**NEW, "event_types": ["BIRTHDAY", {}]}, format="json")

    assert response.status_code == 400
    assert response.json() == {"states": ["Item 2: Not a valid string."]}
    assert event_types.json()["event_types"][0].startswith("Item 2: ")
    assert not Recovery.objects.exists()


def test_a_bare_token_is_a_401_that_says_to_send_token_and_the_key(operator, anonymous_client):
    from rest_framework.authtoken.models import Token

    key = Token.objects.create(user=operator).key

    bare = anonymous_client.get(URL, HTTP_AUTHORIZATION=key)
    right = anonymous_client.get(URL, HTTP_AUTHORIZATION=f"Token {key}")

    assert bare.status_code == 401
    assert bare.json() == {
        "detail": "The Authorization header holds a key without its scheme: send `Authorization: Token <key>`."
    }
    assert right.status_code == 200


def test_the_docs_pages_token_hint_shows_the_scheme_and_the_key(anonymous_client):
    schemes = anonymous_client.get("/api/v1/schema/", {"format": "json"}).json()["components"][
        "securitySchemes"
    ]

    assert "such as `Token 9944b09…`: the key alone is refused (401)" in schemes["tokenAuth"]["description"]


def test_the_openapi_document_states_what_the_server_enforces(anonymous_client, settings):
    schemas = anonymous_client.get("/api/v1/schema/", {"format": "json"}).json()["components"]["schemas"]
    destination, recipient = schemas["DestinationRequest"]["properties"], schemas["UserRequest"]["properties"]

    for field in ("audience_labels", "excluded_labels"):
        assert destination[field]["items"]["pattern"] == recipient["labels"]["items"]["pattern"]
        assert destination[field]["items"]["maxLength"] == 50 and destination[field]["maxItems"] == 20
    assert recipient["language"]["maxLength"] == 35
    assert destination["timeout"]["minimum"] == 0 and destination["timeout"]["exclusiveMinimum"] is True
    assert destination["timeout"]["maximum"] == settings.WEBHOOK_TIMEOUT.total_seconds()
    # http(s) for a webhook, smtps, smtp or smtp+plain for an email destination's relay
    assert (
        destination["url"]["pattern"]
        == r"^([Hh][Tt][Tt][Pp][Ss]?|[Ss][Mm][Tt][Pp]([Ss]|\+[Pp][Ll][Aa][Ii][Nn])?)://"
    )
    assert destination["smtp_password"]["writeOnly"] is True
    assert [s["pattern"] for s in destination["secret"]["oneOf"] if "pattern" in s][0].startswith(r"^whsec_")
    assert "paused" in schemas["User"]["required"] and "paused" in schemas["Destination"]["required"]
    assert "next_digest_local" in schemas["Destination"]["required"]
