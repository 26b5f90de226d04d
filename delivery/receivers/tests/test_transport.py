"""The webhook transport's rules: classification, Retry-After, backoff, headers."""

import asyncio
import json
import random
import socket
import threading
import uuid
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from ipaddress import ip_network

import pytest
from standardwebhooks.webhooks import Webhook

from delivery.credentials.receiver_urls import url_redact
from delivery.models import AttemptOutcome
from delivery.receivers.addresses import ReceiverPolicy
from delivery.receivers.lane_settings import LaneSettings
from delivery.receivers.protocol import ClaimedDelivery
from delivery.receivers.transport import USER_AGENT, WebhookTransport, classify_status
from delivery.rules.retry import RetryPolicy
from delivery.rules.retry import retry_delay as policy_delay
from delivery.tests.pipeline import ScriptedDns, ScriptedSink
from devtools.sink import Reply
from kinds.base import parse_retry_after

# Where each delivery claimed() made goes: a worker's lane knows it (delivery.worker.lanes), not the delivery.
URLS: dict[uuid.UUID, str] = {}


def send_all(
    transport: WebhookTransport,
    *deliveries: ClaimedDelivery,
    secrets: tuple[str, ...] = (),
    timeout: float | None = None,
) -> list:
    """Send on a fresh event loop, one after the other, over one session (as a worker does), as a destination
    of the standard kind with these signing `secrets` and `timeout` (default: the transport's) would be."""
    settings = LaneSettings(
        max_rate=0, max_in_flight=0, timeout=timeout or transport.timeout, signing_secrets=secrets
    )

    async def run():
        await transport.open()
        try:
            return [
                await transport.send(delivery, url=URLS[delivery.id], settings=settings)
                for delivery in deliveries
            ]
        finally:
            await transport.close()

    return asyncio.run(run())


def send(transport: WebhookTransport, delivery: ClaimedDelivery):
    return send_all(transport, delivery)[0]


def retry_delay(*, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before the next try, with the settings' policy and real jitter."""
    return policy_delay(
        attempt=attempt, retry_after=retry_after, policy=RetryPolicy.from_settings(), jitter=random.uniform
    ).total_seconds()


def claimed(url="https://receiver.example/hook") -> ClaimedDelivery:
    delivery_id = uuid.uuid4()
    URLS[delivery_id] = url
    return ClaimedDelivery(
        id=delivery_id,
        event_id=uuid.uuid4(),
        idempotency_key="event-0123456789abcdef",
        endpoint_key="k",
        body=json.dumps({"message": "Hey, Ada Lovelace it's your birthday"}),
        attempt=1,
        max_attempts=8,
    )


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_2xx_is_delivered(status):
    assert classify_status(status) == AttemptOutcome.DELIVERED


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_timeouts_throttling_and_server_errors_are_transient(status):
    assert classify_status(status) == AttemptOutcome.TRANSIENT_FAILURE


@pytest.mark.parametrize("status", [301, 302, 400, 401, 403, 404, 410, 422])
def test_redirects_and_other_client_errors_are_permanent(status):
    assert classify_status(status) == AttemptOutcome.PERMANENT_FAILURE


def test_retry_after_in_seconds_and_as_http_date():
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=90), usegmt=True)

    assert parse_retry_after("120") == 120
    assert parse_retry_after(later, now=now.timestamp()) == pytest.approx(90)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_backoff_is_capped_exponential_with_full_jitter(settings):
    settings.DELIVERY_RETRY_BASE = timedelta(seconds=10)
    settings.DELIVERY_RETRY_MAX = timedelta(seconds=60)

    delays = [retry_delay(attempt=attempt) for attempt in range(1, 12) for _ in range(50)]

    assert all(0 <= d <= 60 for d in delays)
    assert max(retry_delay(attempt=1) for _ in range(200)) <= 10
    assert max(delays) > 30  # later attempts reach towards the cap


def test_retry_after_is_honoured_up_to_the_cap(settings):
    settings.DELIVERY_RETRY_MAX = timedelta(seconds=60)

    assert retry_delay(attempt=1, retry_after=30) == 30
    assert retry_delay(attempt=1, retry_after=86400) == 60


def test_send_posts_json_with_idempotency_key_and_user_agent_and_follows_no_redirect(sink):
    sink.default = Reply(status=302, headers={"Location": "http://127.0.0.1:9/elsewhere"})

    result = send(WebhookTransport(timeout=5), claimed(sink.url))

    assert len(sink.received) == 1
    request = sink.received[0]
    assert json.loads(request.raw_body) == {"message": "Hey, Ada Lovelace it's your birthday"}
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["X-Idempotency-Key"] == "event-0123456789abcdef"
    assert request.headers["User-Agent"] == USER_AGENT
    assert result.outcome == AttemptOutcome.PERMANENT_FAILURE
    assert result.status_code == 302


def test_signed_requests_verify_with_the_standard_webhooks_library(sink):
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    sink.default = Reply(status=204, body=b"")

    send_all(WebhookTransport(timeout=5), claimed(sink.url), secrets=(secret,))

    request = sink.received[0]
    headers = {k: v for k, v in request.headers.items()}
    assert headers["webhook-id"] == "event-0123456789abcdef"
    verified = Webhook(secret).verify(request.raw_body, headers)
    assert verified == {"message": "Hey, Ada Lovelace it's your birthday"}


def test_connection_error_is_transient():
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    result = send(WebhookTransport(timeout=5), claimed(f"http://127.0.0.1:{port}/hook"))

    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert "Connection" in result.error or "refused" in result.error


def test_the_receivers_reason_phrase_is_detail_and_the_description_has_the_standard_one(sink):
    sink.default = Reply(status=503, reason="Unavailable for Hey, Ada Lovelace it's your birthday")

    result = send(WebhookTransport(timeout=5), claimed(sink.url))

    assert result.detail == "Unavailable for Hey, Ada Lovelace it's your birthday"
    assert (result.error, result.describe()) == ("", "HTTP 503 (Service Unavailable)")


def test_an_unknown_status_is_described_by_its_code_alone(sink):
    sink.default = Reply(status=599, reason="Hey, Ada Lovelace")

    assert send(WebhookTransport(timeout=5), claimed(sink.url)).describe() == "HTTP 599"


def test_a_malformed_answer_quoting_the_message_is_described_by_the_errors_class_alone():
    # A receiver whose broken status line echoes the message: the parser's error text quotes it.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 5x3 Hey, Ada Lovelace\r\nContent-Length: 0\r\n\r\n")

    answering = threading.Thread(target=answer, daemon=True)
    answering.start()
    try:
        result = send(
            WebhookTransport(timeout=5), claimed(f"http://127.0.0.1:{server.getsockname()[1]}/hook")
        )
    finally:
        answering.join(5)
        server.close()

    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert "Lovelace" in result.detail
    assert result.describe().startswith("Connection error: ") and "Lovelace" not in result.describe()


def test_response_excerpt_is_cut_to_2_kib(sink):
    sink.default = Reply(status=500, body=b"x" * 10000)

    result = send(WebhookTransport(timeout=5), claimed(sink.url))

    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert len(result.response_excerpt) == 2048


def test_a_hanging_receiver_is_a_timeout(sink):
    sink.default = Reply(delay=1.5)

    result = send(WebhookTransport(timeout=0.3), claimed(sink.url))

    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert result.error == "Timed out after 0.3 s"


def test_a_destinations_shorter_timeout_applies_to_its_request(sink):
    sink.default = Reply(delay=1.5)

    [result] = send_all(WebhookTransport(timeout=5), claimed(sink.url), timeout=0.3)

    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert result.error == "Timed out after 0.3 s"


def test_connections_are_kept_alive_between_posts(sink):
    results = send_all(WebhookTransport(timeout=5), *(claimed(sink.url) for _ in range(3)))

    assert [r.outcome for r in results] == [AttemptOutcome.DELIVERED] * 3

    assert len({r.client_port for r in sink.received}) == 1


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_requests_go_through_the_proxy_the_environment_names(sink, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{unused_port()}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    result = send(WebhookTransport(timeout=5), claimed(sink.url))

    # The proxy is down, so the request never reaches the receiver.
    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert sink.received == []


def test_hosts_in_no_proxy_are_reached_directly(sink, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{unused_port()}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")

    result = send(WebhookTransport(timeout=5), claimed(sink.url))

    assert result.outcome == AttemptOutcome.DELIVERED
    assert len(sink.received) == 1


# --- receivers behind us (SSRF): delivery.receivers.addresses, delivery.receivers.resolver ------------------


def policy(*networks: str, http: bool = True) -> ReceiverPolicy:
    """Plain http allowed unless said (the sinks are http): what these tests vary is the address."""
    return ReceiverPolicy(allow_http=http, allowed_networks=tuple(ip_network(n) for n in networks))


def named(url: str, name: str) -> str:
    """`url` (a sink's, on 127.0.0.1) with `name` for its host."""
    return url.replace("127.0.0.1", name)


@pytest.mark.parametrize(
    "networks, refusal",
    [
        ((), "Refused: receiver.test at 127.0.0.1 is a loopback address (WEBHOOK_ALLOWED_NETWORKS)"),
        (("127.0.0.0/8",), None),
    ],
)
def test_a_name_is_judged_by_the_address_it_resolves_to_when_connecting(sink, networks, refusal):
    dns = ScriptedDns({"receiver.test": [["127.0.0.1"]]})
    transport = WebhookTransport(timeout=5, policy=policy(*networks), resolver=dns)

    result = send(transport, claimed(named(sink.url, "receiver.test")))

    assert dns.asked == ["receiver.test"]
    if refusal:
        assert (result.outcome, result.error, result.refused, result.status_code) == (
            AttemptOutcome.PERMANENT_FAILURE,
            refusal,
            True,
            None,
        )
        assert sink.received == []
    else:
        assert result.outcome == AttemptOutcome.DELIVERED
        assert len(sink.received) == 1


def test_a_literal_refused_address_is_refused_without_dns_or_a_connection(sink):
    dns = ScriptedDns({})

    result = send(WebhookTransport(timeout=5, policy=policy(), resolver=dns), claimed(sink.url))

    assert result.outcome == AttemptOutcome.PERMANENT_FAILURE
    assert result.error == "Refused: 127.0.0.1 is a loopback address (WEBHOOK_ALLOWED_NETWORKS)"
    assert dns.asked == []
    assert sink.received == []


def test_plain_http_is_refused_unless_allowed_for_development(sink):
    result = send(WebhookTransport(timeout=5, policy=policy("127.0.0.0/8", http=False)), claimed(sink.url))

    assert result.outcome == AttemptOutcome.PERMANENT_FAILURE
    assert result.error == f"Refused: {url_redact(sink.url)} is not https (WEBHOOK_ALLOW_HTTP)"
    assert sink.received == []


def test_the_refused_answers_of_a_name_are_dropped_and_the_connection_goes_to_an_allowed_one(network):
    # Given a name that answers a private address first and a listed one second, each a real receiver
    with ScriptedSink() as private, ScriptedSink() as listed:
        network.route("10.0.0.5", to=private.url)
        dns = ScriptedDns({"receiver.test": [["10.0.0.5", "127.0.0.1"]]})
        transport = WebhookTransport(timeout=5, policy=policy("127.0.0.0/8"), resolver=dns)

        result = send(transport, claimed(named(listed.url, "receiver.test")))

        # Then only the allowed address was connected to
        assert result.outcome == AttemptOutcome.DELIVERED
        assert private.received == []
        assert len(listed.received) == 1


@pytest.mark.parametrize(
    "host, answers, refusal",
    [
        ("public.test", ["93.184.215.14"], None),
        (
            "internal.test",
            ["10.0.0.5"],
            "Refused: internal.test at 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)",
        ),
        # The proxy picks among the answers itself: one refused answer refuses the name.
        (
            "mixed.test",
            ["93.184.215.14", "10.0.0.5"],
            "Refused: mixed.test at 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)",
        ),
        ("10.0.0.5", None, "Refused: 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)"),
    ],
)
def test_through_a_proxy_the_proxy_is_not_screened_but_the_receiver_behind_it_is(
    sink, monkeypatch, host, answers, refusal
):
    # Given the sink, on loopback, as the operator's HTTP proxy, and no network allowed
    monkeypatch.setenv("HTTP_PROXY", sink.url.rsplit("/", 1)[0])
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    dns = ScriptedDns({host: [answers]} if answers else {})

    result = send(
        WebhookTransport(timeout=5, policy=policy(), resolver=dns), claimed(f"http://{host}/webhook")
    )

    if refusal:
        assert (result.outcome, result.error) == (AttemptOutcome.PERMANENT_FAILURE, refusal)
        assert sink.received == []
    else:
        assert result.outcome == AttemptOutcome.DELIVERED
        assert len(sink.received) == 1  # handed to the proxy
