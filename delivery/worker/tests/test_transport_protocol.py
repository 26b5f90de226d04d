"""The sender speaks the transport protocol, not HTTP: a kind whose transport is not HTTP goes through the same
sender, lanes, retry decisions and endpoint health as a webhook, side by side with one.

The second transport is a real one over TCP to a real local server: a line of JSON out, a line of answer back
(or the connection closed after the line: the outcome unknown). It reads its answers into the protocol's
verdicts (kinds.base.Verdict) and signals, as an SMTP transport would read its replies, and screens the address
it connects to by the receiver policy (delivery.receivers.addresses), as every transport must.
"""

import asyncio
import json
import socketserver
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address, ip_network

import pytest

from delivery.models import AttemptOutcome, DeliveryStatus, EndpointState
from delivery.receivers.addresses import ReceiverPolicy, address_refusal
from delivery.receivers.lane_settings import LaneSettings
from delivery.receivers.protocol import OUTCOME_OF, ClaimedDelivery, SendResult, answered
from delivery.receivers.smtp import SmtpTransport
from delivery.receivers.transport import WebhookTransport
from delivery.receivers.transports import TRANSPORTS, transports_make
from delivery.rules.answers import Signal
from delivery.rules.health import Answer, Health, HealthPolicy, observe
from delivery.rules.limit import FixedLimit
from delivery.rules.retry import RetryPolicy, decide
from delivery.tests.pipeline import ScriptedSink
from delivery.worker.lane import Lane
from delivery.worker.sender import Sender
from kinds import KINDS, Kind, Reading, Verdict

LOOPBACK = ReceiverPolicy(allow_http=True, allowed_networks=(ip_network("127.0.0.0/8"),))
RETRY = RetryPolicy(base=timedelta(seconds=10), cap=timedelta(hours=1))


class LineServer(socketserver.ThreadingTCPServer):
    """Reads one line per connection and answers what the line's JSON asks for in `reply`; `drop`: nothing."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.lines: list[dict] = []
        super().__init__(("127.0.0.1", 0), LineHandler)

    @property
    def url(self) -> str:
        return f"line://127.0.0.1:{self.server_address[1]}"


class LineHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        line = json.loads(self.rfile.readline())
        self.server.lines.append(line)  # type: ignore[attr-defined]
        if line["reply"] != "drop":
            self.wfile.write(line["reply"].encode() + b"\n")


class LineTransport:
    """A transport of the protocol (delivery.receivers.protocol.Transport) over a TCP line: no HTTP anywhere."""

    def __init__(self, *, timeout: float, policy: ReceiverPolicy | None = None) -> None:
        self.timeout = timeout
        self.policy = policy or LOOPBACK
        self.opened = self.closed = 0

    async def open(self) -> None:
        self.opened += 1

    async def close(self) -> None:
        self.closed += 1

    async def send(self, delivery: ClaimedDelivery, *, url: str, settings: LaneSettings) -> SendResult:
        started_at, started_mono = datetime.now(UTC), time.monotonic()
        parts = urllib.parse.urlsplit(url)
        refusal = address_refusal(address=ip_address(parts.hostname), policy=self.policy)
        if refusal is not None:
            return answered(
                delivery,
                Reading(Verdict.REFUSED),
                started_at=started_at,
                started_mono=started_mono,
                signal=Signal.NEUTRAL,
                error=refusal.describe(),
                refused=True,
            )
        async with asyncio.timeout(settings.timeout):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
            writer.write(delivery.body.encode() + b"\n")
            await writer.drain()
            reply = (await reader.readline()).decode().strip()
            writer.close()
        reading, signal = settings.channel.read_line(reply)  # type: ignore[attr-defined]
        return answered(
            delivery,
            reading,
            started_at=started_at,
            started_mono=started_mono,
            signal=signal,
            error="connection closed after the message" if reading.verdict == Verdict.UNKNOWN else "",
            response_excerpt=reply,
        )


class LineKind(Kind):
    """A kind carried by the line transport: its body, how it reads the transport's answers."""

    name = "line-test"
    label = "Line (test)"
    transport = "line"

    def body(self, payload: Mapping) -> dict:
        return dict(payload)

    def digest_body(self, payload: Mapping) -> dict:
        return dict(payload)

    @staticmethod
    def read_line(reply: str) -> tuple[Reading, Signal | None]:
        word, _, rest = reply.partition(" ")
        if word == "OK":
            return Reading(Verdict.DELIVERED), None
        if word == "WAIT":  # the receiver says when: the lane and the endpoint wait
            return Reading(Verdict.RETRY, retry_after=float(rest)), None
        if word == "LATER":  # one message not now (greylisting): the receiver is well
            return Reading(Verdict.RETRY), Signal.NEUTRAL
        if word == "NO":
            return Reading(Verdict.REFUSED, code="refused"), None
        if word == "GONE":
            return Reading(Verdict.GONE, code=rest), None
        return Reading(Verdict.UNKNOWN), None


@pytest.fixture
def line_server():
    server = LineServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def claimed(reply: str, *, key: str = "") -> ClaimedDelivery:
    return ClaimedDelivery(
        id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        idempotency_key=key or f"event-{uuid.uuid4().hex[:16]}",
        endpoint_key="line",
        body=json.dumps({"message": "Happy birthday, Ada", "reply": reply}),
        attempt=1,
        max_attempts=8,
    )


def lane(*, key: str, url: str, channel: Kind) -> Lane:
    return Lane(
        key=key,
        endpoint_id=1,
        url=url,
        name=key,
        limit=FixedLimit(10),
        settings=LaneSettings(max_rate=0, max_in_flight=0, timeout=2.0, channel=channel),
        retry=RETRY,
    )


def send_through_sender(sender: Sender, pairs: list[tuple[Lane, ClaimedDelivery]]) -> list[SendResult]:
    for each_lane, delivery in pairs:
        sender.start(each_lane, delivery, slot=None)
    deadline = time.monotonic() + 10
    while sender.busy and time.monotonic() < deadline:
        sender.run(seconds=0.1, return_when=lambda: False)
    return sender.take_answers()


REPLIES = {
    # reply: verdict, outcome, signal, what the retry policy makes of a first attempt
    "OK": (Verdict.DELIVERED, AttemptOutcome.DELIVERED, Signal.SUCCESS, DeliveryStatus.DELIVERED),
    "WAIT 30": (Verdict.RETRY, AttemptOutcome.TRANSIENT_FAILURE, Signal.THROTTLE, DeliveryStatus.QUEUED),
    "LATER": (Verdict.RETRY, AttemptOutcome.TRANSIENT_FAILURE, Signal.NEUTRAL, DeliveryStatus.QUEUED),
    "NO": (Verdict.REFUSED, AttemptOutcome.PERMANENT_FAILURE, Signal.NEUTRAL, DeliveryStatus.DEAD),
    "GONE channel_not_found": (
        Verdict.GONE,
        AttemptOutcome.PERMANENT_FAILURE,
        Signal.GONE,
        DeliveryStatus.QUEUED,
    ),
    "drop": (Verdict.UNKNOWN, AttemptOutcome.TRANSIENT_FAILURE, Signal.FAILURE, DeliveryStatus.QUEUED),
}


def test_one_sender_carries_each_kind_by_its_own_transport_and_reads_every_verdict(line_server):
    # Given a sender with the HTTP transport and a line transport, a webhook lane and a line lane
    line = LineTransport(timeout=2.0)
    transports = {"http": WebhookTransport(timeout=2.0, policy=LOOPBACK), "line": line}
    sender = Sender(transports=transports, after_each=lambda: None)
    sender.open()
    try:
        with ScriptedSink() as sink:
            webhook_lane = lane(key="http", url=sink.url, channel=KINDS["standard"])
            line_lane = lane(key="line", url=line_server.url, channel=LineKind())
            by_reply = {reply: claimed(reply) for reply in REPLIES}
            webhook = claimed("unused")

            # When each goes out through the one sender
            results = send_through_sender(
                sender, [(webhook_lane, webhook), *((line_lane, d) for d in by_reply.values())]
            )
            received_keys = set(sink.keys())
    finally:
        sender.close()

    # Then the webhook went over HTTP and nothing else did; every line delivery went over the line
    assert received_keys == {webhook.idempotency_key}
    assert sorted(line["reply"] for line in line_server.lines) == sorted(REPLIES)
    assert (line.opened, line.closed) == (1, 1)
    by_id = {r.delivery.id: r for r in results}
    assert (by_id[webhook.id].outcome, by_id[webhook.id].signal) == (AttemptOutcome.DELIVERED, Signal.SUCCESS)
    # And each answer is the protocol's, whatever carried it: outcome, signal, the retry policy's decision
    for reply, (verdict, outcome, signal, status) in REPLIES.items():
        result = by_id[by_reply[reply].id]
        assert (result.outcome, result.signal, OUTCOME_OF[verdict]) == (outcome, signal, outcome), reply
        decision = decide(
            outcome=result.outcome,
            attempt=1,
            max_attempts=8,
            description=result.describe(),
            signal=result.signal,
            retry_after=result.retry_after,
            policy=RETRY,
        )
        assert decision.status == status, reply
    # The receiver's own delay blocks its lane at once (as a webhook's Retry-After does), and costs no attempt
    assert line_lane.blocked_until_mono > time.monotonic() + 20
    wait = by_id[by_reply["WAIT 30"].id]
    assert wait.retry_after == 30.0
    assert not decide(
        outcome=wait.outcome, attempt=1, max_attempts=8, description="", signal=wait.signal, policy=RETRY
    ).charged
    # An unknown outcome says so, is tried again, and counts against the receiver
    unknown = by_id[by_reply["drop"].id]
    assert unknown.describe() == "Outcome unknown: connection closed after the message"
    assert by_id[by_reply["GONE channel_not_found"].id].gone


HEALTH = HealthPolicy(
    failure_threshold=3,
    probe_first_interval=timedelta(seconds=2),
    probe_max_interval=timedelta(seconds=60),
    retry=RETRY,
)
FRESH = Health(
    state=EndpointState.HEALTHY,
    consecutive_failures=0,
    last_success_at=None,
    last_failure_at=None,
    last_error="",
    failing_since=None,
    next_probe_at=None,
    probe_interval=None,
    blocked_until=None,
)


@pytest.mark.parametrize(
    "reply, state",
    [
        ("LATER", EndpointState.HEALTHY),  # one message's "not now" says nothing against the receiver
        ("NO", EndpointState.HEALTHY),
        ("drop", EndpointState.FAILING),
        ("GONE channel_not_found", EndpointState.GONE),
    ],
)
def test_the_endpoints_health_reads_a_line_transports_answers_by_their_signals(line_server, reply, state):
    transport = LineTransport(timeout=2.0)
    settings = LaneSettings(max_rate=0, max_in_flight=0, timeout=2.0, channel=LineKind())

    async def send_three():
        return [
            await transport.send(claimed(reply), url=line_server.url, settings=settings) for _ in range(3)
        ]

    results = asyncio.run(send_three())
    now = datetime.now(UTC)
    answers = [
        Answer(signal=r.signal, started_at=r.started_at, finished_at=r.finished_at, description=r.describe())
        for r in results
    ]

    assert observe(health=FRESH, answers=answers, now=now, policy=HEALTH).state == state


def test_a_line_transport_screens_its_address_by_the_receiver_policy(line_server):
    # Loopback is not allowed by the default policy: refused without a connection, the endpoint untouched
    transport = LineTransport(timeout=2.0, policy=ReceiverPolicy(allow_http=False, allowed_networks=()))
    settings = LaneSettings(max_rate=0, max_in_flight=0, timeout=2.0, channel=LineKind())

    result = asyncio.run(transport.send(claimed("OK"), url=line_server.url, settings=settings))

    assert (result.outcome, result.signal, result.refused) == (
        AttemptOutcome.PERMANENT_FAILURE,
        Signal.NEUTRAL,
        True,
    )
    assert "loopback" in result.describe() and line_server.lines == []


def test_every_kind_names_a_registered_transport_and_a_process_opens_one_of_each():
    assert {kind.transport for kind in KINDS.values()} <= set(TRANSPORTS)
    made = transports_make(timeout=5.0)
    assert set(made) == {kind.transport for kind in KINDS.values()} == {"http", "smtp"}
    assert isinstance(made["http"], WebhookTransport)
    assert isinstance(made["smtp"], SmtpTransport)
