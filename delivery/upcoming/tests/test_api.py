"""GET /api/v1/upcoming/: the list, and a 400 naming the field for each bad value."""

import pytest
from django.contrib.auth.models import Permission
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from delivery.upcoming.tests.helpers import born, destination, digest_destination, in_days

pytestmark = pytest.mark.django_db

URL = "/api/v1/upcoming/"


def test_the_list_names_each_occurrence_with_where_and_when_in_local_time_and_utc(api_client):
    born(2, first="Ada", timezone="America/Los_Angeles")
    chat = destination("chat")
    digest_destination("berlin")

    body = api_client.get(URL, {"days": 7}).json()

    (ada,) = body["results"]
    assert ada["recipient_name"] == "Ada Lovelace"
    assert ada["occurrence_date"] == in_days(2).isoformat()
    assert ada["milestone"] is not None
    placements = {p["destination_name"]: p for p in ada["placements"]}
    assert placements["chat"]["sent_as"] == "message"
    assert placements["chat"]["destination"] == chat.pk
    assert (
        placements["chat"]["at_local"]
        == f"{in_days(2).isoformat()}T09:00:00" + placements["chat"]["at_local"][-6:]
    )
    assert placements["chat"]["timezone"] == "America/Los_Angeles"
    assert placements["berlin"]["sent_as"] == "digest"
    assert placements["berlin"]["at_local"].startswith(f"{in_days(2).isoformat()}T09:30:00+0")
    assert placements["berlin"]["at"].endswith("Z")
    assert body["next_cursor"] is None


def test_a_left_out_occurrence_carries_its_reason(api_client):
    born(2, first="Ada", labels=["team:data"])
    destination("platform", audience_labels=["team:platform"])

    (ada,) = api_client.get(URL).json()["results"]

    assert ada["placements"] == []
    assert [(r["destination"], r["reason"]) for r in ada["left_out"]] == [(None, "not_in_audience")]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"days": "0"}, "days"),
        ({"days": "367"}, "days"),
        ({"days": "two"}, "days"),
        ({"destination": "abc"}, "destination"),
        ({"destination": "999999"}, "destination"),
        ({"label": "team platform"}, "label"),
        ({"type": "WEDDING"}, "type"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
    ],
)
def test_a_bad_value_is_a_400_naming_its_field(api_client, query, field):
    response = api_client.get(URL, query)

    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_a_label_is_read_by_the_recipients_rule_in_any_case(api_client):
    born(2, first="Ada", labels=["team:platform"])
    destination("chat")

    assert [
        r["recipient_name"] for r in api_client.get(URL, {"label": "Team:Platform"}).json()["results"]
    ] == ["Ada Lovelace"]


def test_reading_it_needs_an_account(anonymous_client):
    assert anonymous_client.get(URL).status_code == 401


def test_reading_it_needs_to_see_both_recipients_and_destinations(django_user_model):
    account = django_user_model.objects.create_user(username="destinations-only")
    account.user_permissions.add(Permission.objects.get(codename="view_destination"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=account).key}")

    assert client.get(URL).status_code == 403
    account.user_permissions.add(
        Permission.objects.get(codename="view_user", content_type__app_label="users")
    )
    assert client.get(URL).status_code == 200
