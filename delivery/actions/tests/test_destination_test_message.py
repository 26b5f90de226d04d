"""A destination's test message (POST /api/v1/destinations/{id}/test/), sent to a real local receiver."""

import json
import logging
from datetime import timedelta

import pytest
from prometheus_client import REGISTRY
from rest_framework.test import APIClient
from standardwebhooks.webhooks import Webhook

from conftest import permissions_named
from delivery.actions.ping import LONGEST_WAIT, destination_send_test
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create, destination_pause, destination_rotate_secret
from delivery.models import Delivery, DeliveryAttempt, Destination, Endpoint
from devtools.sink import Reply
from kinds.tests.receivers import judge_discord, judge_slack, judge_teams_flow

pytestmark = pytest.mark.django_db

URL = "/api/v1/destinations/"


def destination_at(url: str, **fields):
    return destination_create(
        settings=DestinationSettings(name=fields.pop("name", "crm"), url=url, **fields), operator="ops-bob"
    )


def send_test(api_client, destination: Destination):
    return api_client.post(f"{URL}{destination.pk}/test/")


def attempts_measured() -> float:
    return sum(
        REGISTRY.get_sample_value("birthday_delivery_attempt_duration_seconds_count", {"outcome": outcome})
        or 0
        for outcome in ("DELIVERED", "TRANSIENT_FAILURE", "PERMANENT_FAILURE")
    )


def test_an_accepted_test_message_is_signed_like_a_delivery_and_recorded_nowhere(api_client, sink, caplog):
    caplog.set_level(logging.DEBUG)
    created = destination_at(sink.url)
    measured = attempts_measured()

    response = send_test(api_client, created.destination)

    assert response.status_code == 200, response.content
    answer = response.json()
    assert (answer["status_code"], answer["ok"], answer["error"], answer["refused"]) == (200, True, "", False)
    assert answer["body_start"] == '{"ok":true}'
    assert 0 <= answer["latency_ms"] < 5000
    [request] = sink.received
    assert request.headers["webhook-id"] == request.headers["X-Idempotency-Key"] == answer["message_id"]
    assert answer["message_id"].startswith("test-")
    payload = Webhook(created.value).verify(request.raw_body, request.headers)
    assert (payload["event_type"], payload["test"], payload["destination"]) == (
        "destination.test",
        True,
        "crm",
    )
    assert Delivery.objects.count() == DeliveryAttempt.objects.count() == 0
    # Its endpoint is the one made with the destination: the test message moved nothing of it.
    assert list(Endpoint.objects.values_list("consecutive_failures", "last_success_at", "last_error")) == [
        (0, None, "")
    ]
    assert attempts_measured() == measured


def test_each_test_message_has_a_message_id_of_its_own(api_client, sink):
    destination = destination_at(sink.url).destination

    first, second = (send_test(api_client, destination).json() for _ in range(2))

    assert first["message_id"] != second["message_id"]
    assert [r.idempotency_key for r in sink.received] == [first["message_id"], second["message_id"]]


def test_during_a_rotation_every_secret_in_force_signs_the_test_message(api_client, sink):
    created = destination_at(sink.url)
    rotated = destination_rotate_secret(destination=created.destination, operator="ops-bob")

    send_test(api_client, created.destination)

    [request] = sink.received
    assert len(request.headers["webhook-signature"].split()) == 2
    for secret in (created.value, rotated.value):
        Webhook(secret).verify(request.raw_body, request.headers)


def test_the_receivers_500_is_an_answer_not_our_error(api_client, sink):
    sink.default = Reply(status=500, body=b"upstream unavailable")
    destination = destination_at(sink.url).destination

    response = send_test(api_client, destination)

    assert response.status_code == 200
    answer = response.json()
    assert (answer["status_code"], answer["ok"], answer["body_start"]) == (500, False, "upstream unavailable")
    assert answer["error"] == "Internal Server Error"
    assert Delivery.objects.count() == 0


def test_a_receiver_slower_than_the_destinations_timeout_is_a_timeout_after_that_timeout(api_client, sink):
    sink.default = Reply(delay=3)
    destination = destination_at(sink.url, timeout=timedelta(seconds=0.5)).destination

    answer = send_test(api_client, destination).json()

    assert (answer["status_code"], answer["ok"], answer["refused"]) == (None, False, False)
    assert answer["error"] == "Timed out after 0.5 s"
    assert 450 <= answer["latency_ms"] < 2500


def test_the_wait_is_never_longer_than_a_web_request_may_take(settings, sink, monkeypatch):
    # The destination may wait as long as WEBHOOK_TIMEOUT allows; the page waits at most LONGEST_WAIT.
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=60)
    monkeypatch.setattr("delivery.actions.ping.LONGEST_WAIT", 0.5)
    sink.default = Reply(delay=3)
    destination = destination_at(sink.url).destination

    result = destination_send_test(destination=destination, operator="ops-alice")

    assert result.error == "Timed out after 0.5 s" and result.latency_ms < 2500
    assert LONGEST_WAIT < 30  # gunicorn's --timeout in deploy/


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_an_address_the_worker_refuses_is_refused_without_a_request(api_client, sink, settings, host):
    destination = destination_at(sink.url.replace("127.0.0.1", host)).destination
    settings.WEBHOOK_ALLOWED_NETWORKS = []  # loopback no longer allowed, as in production

    answer = send_test(api_client, destination).json()

    assert (answer["status_code"], answer["ok"], answer["refused"]) == (None, False, True)
    assert answer["error"].startswith("Refused: ") and "a loopback address" in answer["error"]
    assert sink.received == []


def test_a_paused_destination_still_gets_its_test_message(api_client, sink):
    destination = destination_at(sink.url).destination
    destination_pause(destination=destination, operator="ops-bob")

    assert send_test(api_client, destination).json()["ok"] is True
    assert len(sink.received) == 1


@pytest.mark.parametrize(
    ("format_", "judge"), [("slack", judge_slack), ("discord", judge_discord), ("teams", judge_teams_flow)]
)
def test_a_chat_destinations_test_message_is_a_body_its_service_takes(api_client, sink, format_, judge):
    destination = destination_at(sink.url, format=format_).destination

    send_test(api_client, destination)

    [request] = sink.received
    assert judge(request.raw_body).taken
    assert "Test message" in json.dumps(request.body)


def test_an_unsigned_destination_gets_an_unsigned_test_message(api_client, sink):
    destination = destination_at(sink.url).destination
    destination.secrets.all().delete()

    assert send_test(api_client, destination).json()["ok"] is True
    assert "webhook-signature" not in sink.received[0].headers


def test_the_secret_is_in_no_answer_and_no_log_line_and_the_log_says_who_tested_what(
    api_client, sink, caplog
):
    caplog.set_level(logging.DEBUG)
    # A receiver that echoes back what it was sent, headers included.
    sink.respond = lambda received: Reply(body=json.dumps(received.headers).encode())
    created = destination_at(sink.url)

    response = send_test(api_client, created.destination)

    key = created.value.removeprefix("whsec_")
    assert key not in response.content.decode() and key not in caplog.text
    [line] = [r for r in caplog.records if r.name == "delivery.actions.ping"]
    assert (line.operator, line.destination, line.status_code) == ("operator", "crm", 200)


def test_an_unknown_destination_is_404_and_sends_nothing(api_client, sink):
    assert api_client.post(f"{URL}999999/test/").status_code == 404
    assert sink.received == []


def test_sending_a_test_message_needs_the_change_permission(sink, django_user_model):
    destination = destination_at(sink.url).destination
    viewer = django_user_model.objects.create_user(username="viewer", password="s3cret-pass!")
    viewer.user_permissions.set(permissions_named("delivery.view_destination"))
    client = APIClient()
    client.force_authenticate(viewer)

    assert client.post(f"{URL}{destination.pk}/test/").status_code == 403
    assert sink.received == []


def test_the_openapi_description_has_the_test_operation(client):
    schema = json.loads(client.get("/api/v1/schema/?format=json").content)

    operation = schema["paths"][URL + "{id}/test/"]["post"]
    assert operation["summary"] == "Send a test message to a destination"
    assert "200" in operation["responses"] and "404" in operation["responses"]
