"""A destination's recoveries in the API: count first (dry_run), then record for the workers, follow, cancel."""

import json

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from conftest import permissions_named
from delivery.actions.recovery import recoveries_advance
from delivery.actions.tests.recovery_data import TUESDAY_8, WEDNESDAY_10
from delivery.models import Delivery, DeliveryStatus, Recovery, RecoveryStatus

pytestmark = pytest.mark.django_db

WINDOW = {
    "since": "2026-11-24T09:00:00+01:00",
    "until": "2026-11-25T11:00:00+01:00",
}  # TUESDAY_8 to WEDNESDAY_10


def url(destination, rid=None) -> str:
    base = f"/api/v1/destinations/{destination.pk}/recoveries/"
    return base if rid is None else f"{base}{rid}/"


def test_a_dry_run_answers_the_count_and_records_nothing(api_client, history):
    crm, _, _ = history

    response = api_client.post(
        url(crm), {"states": ["DELIVERED", "DEAD"], **WINDOW, "dry_run": True}, format="json"
    )

    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["dry_run"], body["count"], body["states"]) == (True, 6, ["DELIVERED", "DEAD"])
    assert body["since"] == "2026-11-24T08:00:00Z"
    assert not Recovery.objects.exists()


def test_a_recovery_is_recorded_with_that_count_and_its_progress_is_followed_to_the_end(api_client, history):
    crm, _, _ = history
    count = api_client.post(
        url(crm), {"states": ["DELIVERED"], **WINDOW, "dry_run": True}, format="json"
    ).json()

    created = api_client.post(url(crm), {"states": ["DELIVERED"], **WINDOW}, format="json")

    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["status"], body["total"], body["done"], body["requested_by"]) == (
        "PENDING",
        count["count"],
        0,
        "operator",
    )
    assert not Delivery.objects.filter(
        status=DeliveryStatus.QUEUED
    ).exists()  # the request queued nothing itself
    while recoveries_advance(batch_size=3) is not None:
        pass
    followed = api_client.get(url(crm, body["id"])).json()
    assert (followed["status"], followed["done"], followed["skipped"], followed["batches"]) == (
        "FINISHED",
        4,
        0,
        2,
    )
    listed = api_client.get(url(crm)).json()
    assert [r["id"] for r in listed["results"]] == [body["id"]]


@pytest.mark.parametrize(
    "body, field",
    [
        ({"states": ["QUEUED"], **WINDOW}, "states"),
        ({"states": ["SENDING"], **WINDOW}, "states"),
        ({"states": ["GONE"], **WINDOW}, "states"),
        ({"states": [], **WINDOW}, "states"),
        ({"states": "DEAD", **WINDOW}, "states"),
        ({"states": ["DEAD"], "since": WINDOW["until"], "until": WINDOW["since"]}, "until"),
        ({"states": ["DEAD"], "since": "2026-11-24T08:00:00", "until": WINDOW["until"]}, "since"),
        ({"states": ["DEAD"], "since": WINDOW["since"], "until": "2026-11-25 10:00"}, "until"),
        ({"states": ["DEAD"], "since": "Tuesday", "until": WINDOW["until"]}, "since"),
        ({"states": ["DEAD"], "until": WINDOW["until"]}, "since"),
        ({"states": ["DEAD"], **WINDOW, "destination": 2}, "destination"),
        ({"states": ["DEAD"], **WINDOW, "dry_run": "perhaps"}, "dry_run"),
    ],
)
@pytest.mark.parametrize("dry_run", [False, True])
def test_bad_input_is_a_400_naming_the_field_and_nothing_is_recorded(
    api_client, history, body, field, dry_run
):
    crm, _, _ = history
    if dry_run and "dry_run" not in body:
        body = {**body, "dry_run": True}

    response = api_client.post(url(crm), body, format="json")

    assert response.status_code == 400, response.content
    assert field in response.json()
    assert not Recovery.objects.exists()


def test_nothing_to_recover_is_a_400_and_a_second_recovery_at_once_a_409(api_client, history):
    crm, _, _ = history
    empty = api_client.post(
        url(crm),
        {"states": ["DEAD"], "since": "2026-11-25T10:00:00Z", "until": "2026-11-25T11:00:00Z"},
        format="json",
    )
    assert empty.status_code == 400 and "nothing to recover" in empty.json()["non_field_errors"][0]

    first = api_client.post(url(crm), {"states": ["DEAD"], **WINDOW}, format="json")
    second = api_client.post(url(crm), {"states": ["DELIVERED"], **WINDOW}, format="json")

    assert first.status_code == 201
    assert second.status_code == 409 and "already under way" in second.json()["detail"]
    assert Recovery.objects.count() == 1


def test_cancel_stops_a_recovery_and_a_second_cancel_is_a_409(api_client, history):
    crm, _, _ = history
    rid = api_client.post(url(crm), {"states": ["DEAD"], **WINDOW}, format="json").json()["id"]

    cancelled = api_client.post(url(crm, rid) + "cancel/")
    again = api_client.post(url(crm, rid) + "cancel/")

    assert cancelled.status_code == 200 and cancelled.json()["status"] == "CANCELLED"
    assert again.status_code == 409
    assert Recovery.objects.get().status == RecoveryStatus.CANCELLED


def test_another_destinations_recovery_or_an_unknown_destination_is_a_404(api_client, history):
    crm, chat, _ = history
    rid = api_client.post(url(crm), {"states": ["DEAD"], **WINDOW}, format="json").json()["id"]

    assert api_client.get(url(chat, rid)).status_code == 404
    assert api_client.post(url(chat, rid) + "cancel/").status_code == 404
    assert api_client.get("/api/v1/destinations/999999/recoveries/").status_code == 404
    assert (
        api_client.post(
            "/api/v1/destinations/999999/recoveries/", {"states": ["DEAD"], **WINDOW}, format="json"
        ).status_code
        == 404
    )


def test_reading_needs_view_destination_and_recovering_change_destination(history, anonymous_client):
    crm, _, _ = history
    reader = get_user_model().objects.create_user(username="reader", password="s3cret-pass!")
    reader.user_permissions.set(permissions_named("delivery.view_destination"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=reader).key}")

    assert client.get(url(crm)).status_code == 200
    assert (
        client.post(url(crm), {"states": ["DEAD"], **WINDOW, "dry_run": True}, format="json").status_code
        == 403
    )
    assert anonymous_client.get(url(crm)).status_code == 401
    assert not Recovery.objects.exists()


def test_the_openapi_description_has_every_recovery_operation(client):
    paths = json.loads(client.get("/api/v1/schema/?format=json").content)["paths"]
    base = "/api/v1/destinations/{destination_pk}/recoveries/"

    assert set(paths[base]) >= {"get", "post"}
    assert set(paths[base + "{id}/"]) >= {"get"}
    assert set(paths[base + "{id}/cancel/"]) >= {"post"}
    assert set(paths[base]["post"]["responses"]) >= {"200", "201", "400", "409"}


def test_times_are_the_window_the_service_was_given(api_client, history):
    crm, _, _ = history
    body = api_client.post(url(crm), {"states": ["DEAD"], **WINDOW}, format="json").json()

    recovery = Recovery.objects.get(pk=body["id"])
    assert (recovery.since, recovery.until) == (TUESDAY_8, WEDNESDAY_10)
