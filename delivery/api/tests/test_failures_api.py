"""The API's destination health and failures by cause: what the console shows, for scripts and other tools."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from console.tests.console_data import dead_at, delivered_at
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import Delivery, DeliveryStatus, FailureAcknowledgement

pytestmark = pytest.mark.django_db


def destination(name: str):
    return destination_create(
        settings=DestinationSettings(name=name, url=f"https://{name}.example.org/hook"), operator="ops"
    ).destination


def test_destination_health_says_a_destination_with_only_dead_deliveries_is_failing(api_client):
    broken, fine = destination("crm-broken"), destination("crm-fine")
    for _ in range(3):
        dead_at(broken, status_code=400)
    delivered_at(fine)

    response = api_client.get("/api/v1/destinations-health/")

    assert response.status_code == 200
    by_name = {row["name"]: row for row in response.json()}
    broken_row = by_name["crm-broken"]
    assert (broken_row["condition"], broken_row["needs_attention"], broken_row["endpoint_state"]) == (
        "failing",
        True,
        "HEALTHY",
    )
    assert (broken_row["dead_last_hour"], broken_row["dead_last_day"]) == (3, 3)
    assert (
        broken_row["last_failure_cause"],
        broken_row["last_failure"],
        broken_row["last_failure_status"],
    ) == (
        "http_400",
        "HTTP 400 Bad Request",
        400,
    )
    assert broken_row["last_delivered_at"] is None
    assert (by_name["crm-fine"]["condition"], by_name["crm-fine"]["needs_attention"]) == ("ok", False)


def test_the_failures_list_has_a_row_per_destination_and_cause(api_client):
    crm = destination("crm")
    latest = [dead_at(crm, status_code=400) for _ in range(2)][-1]
    dead_at(crm, status_code=None, error="Timed out after 10 s")

    rows = api_client.get("/api/v1/failures/", {"window": "24h"}).json()

    assert sorted((r["destination_name"], r["cause"], r["count"]) for r in rows) == [
        ("crm", "http_400", 2),
        ("crm", "timeout", 1),
    ]
    four_hundred = next(r for r in rows if r["cause"] == "http_400")
    assert four_hundred["cause_label"] == "HTTP 400 Bad Request"
    assert four_hundred["examples"][0] == str(latest.pk)


def test_bad_filters_and_unknown_causes_get_a_400_and_change_nothing(api_client):
    crm = destination("crm")
    dead_at(crm)

    assert api_client.get("/api/v1/failures/", {"window": "1y"}).status_code == 400
    assert api_client.get("/api/v1/failures/", {"destination": "x"}).status_code == 400
    for body in (
        {"destination": crm.pk, "cause": "http_4xx"},
        {"destination": 999, "cause": "http_400"},
        {"cause": "x", "y": 1},
    ):
        assert api_client.post("/api/v1/failures/acknowledge/", body, format="json").status_code == 400
        assert api_client.post("/api/v1/failures/resend/", body, format="json").status_code == 400
    assert not FailureAcknowledgement.objects.exists()
    assert Delivery.objects.get().status == DeliveryStatus.DEAD


def test_acknowledge_and_resend_a_group(api_client):
    crm = destination("crm")
    dead_at(crm, status_code=400)
    timeout = dead_at(crm, status_code=None, error="Timed out after 10 s")

    left = api_client.post(
        "/api/v1/failures/acknowledge/", {"destination": crm.pk, "cause": "http_400"}, format="json"
    )
    resent = api_client.post(
        "/api/v1/failures/resend/", {"destination": crm.pk, "cause": "timeout"}, format="json"
    )

    assert left.status_code == 200 and [r["cause"] for r in left.json()] == ["timeout"]
    assert resent.json() == {"resent": 1, "refused": 0, "remaining": 0}
    assert Delivery.objects.get(pk=timeout.pk).status == DeliveryStatus.QUEUED
    assert FailureAcknowledgement.objects.get().acknowledged_by == "operator"


def test_reading_needs_view_destination_and_acting_change_destination(django_user_model):
    from rest_framework.authtoken.models import Token

    from conftest import permissions_named

    account = django_user_model.objects.create_user(username="reader", password="x-Pass-123!")
    account.user_permissions.set(permissions_named("delivery.view_destination"))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=account).key}")
    crm = destination("crm")

    assert client.get("/api/v1/failures/").status_code == 200
    assert client.get("/api/v1/destinations-health/").status_code == 200
    assert (
        client.post(
            "/api/v1/failures/acknowledge/", {"destination": crm.pk, "cause": "http_400"}, format="json"
        ).status_code
        == 403
    )
    assert APIClient().get("/api/v1/failures/").status_code == 401
