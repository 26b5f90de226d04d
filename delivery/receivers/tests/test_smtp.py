"""The SMTP transport against real local SMTP servers (aiosmtpd): each answer read honestly, headers safe.

Accepting, greylisting (451 then 250), refusing one address at RCPT (550), dropping the
connection after the final dot, and wanting AUTH over STARTTLS (a self-signed certificate
made here, trusted through SMTP_CA_FILE). Messages are parsed back with Python's `email`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from email.policy import default as default_policy
from ipaddress import ip_network

import pytest

from delivery.models import AttemptOutcome
from delivery.receivers.addresses import ReceiverPolicy
from delivery.receivers.lane_settings import LaneSettings, Relay, lane_settings
from delivery.receivers.protocol import ClaimedDelivery, SendResult
from delivery.receivers.smtp import SmtpTransport, message_id, relay_url_refusal
from delivery.receivers.tests.smtp_servers import (
    Accepting,
    Dropping,
    Greylisting,
    Refusing,
    self_signed,
    smtp_server,
)
from delivery.rules.answers import Signal
from kinds import KINDS

LOCAL = ReceiverPolicy(allow_http=True, allowed_networks=(ip_network("127.0.0.0/8"),))
EMAIL = KINDS["email"]
RELAY = Relay(
    destination_id=7,
    destination_name="Greetings",
    from_address="greetings@example.com",
    from_name="People Team",
    reply_to="people@example.com",
    # As long as a signed token makes it: the header stays one line, the URL whole.
    unsubscribe=lambda user_id: f"https://greetings.example.com/p/unsubscribe/{user_id}:{'x' * 80}/",
)


def delivery(
    *, to: str, first_name: str = "Ada", key: str | None = None, message: str | None = None
) -> ClaimedDelivery:
    payload = {
        "message": message or f"Hey, {first_name} Lovelace it's your birthday",
        "subject": f"Happy birthday, {first_name}!",
        "email": to,
        "user_id": str(uuid.uuid4()),
        "event_id": str(uuid.uuid4()),
        "event_type": "BIRTHDAY",
    }
    return ClaimedDelivery(
        id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        idempotency_key=key or uuid.uuid4().hex,
        endpoint_key="k",
        body=json.dumps(EMAIL.body(payload)),
        attempt=1,
        max_attempts=5,
    )


def settings_of(relay: Relay = RELAY) -> LaneSettings:
    return lane_settings(format="email", relay=relay)


def send_all(
    url: str, deliveries: list[ClaimedDelivery], *, settings: LaneSettings | None = None
) -> list[SendResult]:
    """Send each in turn through one transport (one session reused), and close it."""

    async def run() -> list[SendResult]:
        transport = SmtpTransport(timeout=5, policy=LOCAL)
        await transport.open()
        try:
            return [await transport.send(d, url=url, settings=settings or settings_of()) for d in deliveries]
        finally:
            await transport.close()

    return asyncio.run(run())


@pytest.fixture(autouse=True)
def _smtp_settings(settings):
    settings.SMTP_CA_FILE = ""
    settings.SMTP_MESSAGES_PER_SESSION = 100
    settings.SMTP_IDLE_SECONDS = 30.0
    settings.SMTP_LOCAL_HOSTNAME = "worker.test"


def test_an_accepting_relay_takes_each_message_once_over_one_session_with_every_header():
    with smtp_server(Accepting()) as server:
        # given three greetings, when sent over one transport
        deliveries = [delivery(to=f"p{n}@example.org") for n in range(3)]
        results = send_all(server.url(), deliveries)
    # then each is delivered, each arrived once, with the headers a greeting carries
    assert [r.outcome for r in results] == [AttemptOutcome.DELIVERED] * 3
    assert [r.signal for r in results] == [Signal.SUCCESS] * 3
    taken = server.handler.taken
    assert [t.rcpt_tos for t in taken] == [[f"p{n}@example.org"] for n in range(3)]
    message = taken[0].message
    assert message["Message-ID"] == message_id(
        idempotency_key=deliveries[0].idempotency_key, from_address="greetings@example.com"
    )
    assert message["Message-ID"].endswith("@example.com>")
    assert message["From"] == "People Team <greetings@example.com>"
    assert message["Reply-To"] == "people@example.com"
    assert message["Auto-Submitted"] == "auto-generated"
    assert message["List-Id"] == '"Greetings" <destination-7.example.com>'
    user_id = json.loads(deliveries[0].body)["user_id"]
    unsubscribe = f"<https://greetings.example.com/p/unsubscribe/{user_id}:{'x' * 80}/>"
    assert message["List-Unsubscribe"] == unsubscribe
    # written whole on one line, as RFC 8058's readers take it (never as RFC 2047 encoded words)
    assert f"\r\nList-Unsubscribe: {unsubscribe}\r\n".encode() in taken[0].content
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert message["Date"]
    assert message["Subject"] == "Happy birthday, Ada!"
    assert message.get_content_type() == "multipart/alternative"
    text, html = (part.get_content_type() for part in message.iter_parts())
    assert (text, html) == ("text/plain", "text/html")
    assert message.get_body(("plain",)).get_content().strip() == "Hey, Ada Lovelace it's your birthday"


def test_one_session_carries_many_messages_and_is_reopened_after_the_relays_limit(settings):
    settings.SMTP_MESSAGES_PER_SESSION = 2
    sessions = []

    class Counting(Accepting):
        async def handle_EHLO(self, server, session, envelope, hostname, responses):  # noqa: N802
            sessions.append(hostname)
            session.host_name = hostname  # aiosmtpd leaves it to a handler that answers EHLO
            return responses

    with smtp_server(Counting()) as server:
        results = send_all(server.url(), [delivery(to=f"p{n}@example.org") for n in range(5)])
    assert [r.error for r in results] == [""] * 5
    # 5 messages, 2 a session: three sessions, each greeted once (no STARTTLS on smtp+plain)
    assert sessions == ["worker.test"] * 3


def test_a_greylisting_relay_is_retried_without_marking_it_failing_then_takes_the_message():
    with smtp_server(Greylisting()) as server:
        first, second = send_all(server.url(), [d := delivery(to="grey@example.org"), d])
    # the 451 is retried under the usual back-off and says nothing against the relay
    assert first.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert first.signal == Signal.NEUTRAL
    assert first.error == "SMTP 451 at RCPT"
    assert "Greylisted" in first.detail
    assert second.outcome == AttemptOutcome.DELIVERED
    assert server.handler.to() == {"grey@example.org": 1}


def test_a_refusal_at_rcpt_is_that_address_dead_and_named_while_the_session_goes_on():
    with smtp_server(Refusing(refused=frozenset({"gone@example.org"}))) as server:
        refused, taken = send_all(
            server.url(), [delivery(to="gone@example.org"), delivery(to="ok@example.org")]
        )
    assert refused.outcome == AttemptOutcome.PERMANENT_FAILURE
    assert refused.signal == Signal.NEUTRAL
    assert refused.undeliverable == "gone@example.org"
    assert refused.error == "SMTP 550 at RCPT"
    assert taken.outcome == AttemptOutcome.DELIVERED
    assert taken.undeliverable == ""
    assert server.handler.to() == {"ok@example.org": 1}


def test_a_fixed_address_refused_is_no_persons_address_to_mark():
    relay = Relay(**{**RELAY.__dict__, "to": ("hr@example.org",)})
    with smtp_server(Refusing(refused=frozenset({"hr@example.org"}))) as server:
        (refused,) = send_all(server.url(), [delivery(to="")], settings=settings_of(relay))
    assert refused.outcome == AttemptOutcome.PERMANENT_FAILURE
    assert refused.undeliverable == ""


def test_a_connection_lost_after_the_final_dot_is_an_unknown_outcome_resent_under_the_same_message_id():
    with smtp_server(Dropping()) as server:
        first, second = send_all(server.url(), [d := delivery(to="ada@example.org"), d])
    # the outcome is unknown, said so, and the relay is not trusted with it (a lost connection)
    assert first.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert first.error.startswith("Outcome unknown")
    assert first.signal == Signal.FAILURE
    assert second.outcome == AttemptOutcome.DELIVERED
    # the servers saw the message twice, under one Message-ID
    (mid,) = server.handler.dropped
    assert server.handler.message_ids() == {mid: 1}
    assert server.handler.dropped == {mid: 1}


def test_a_destination_that_gives_unknowns_up_records_it_as_given_up():
    relay = Relay(**{**RELAY.__dict__, "resend_unknown": False})
    with smtp_server(Dropping()) as server:
        (result,) = send_all(server.url(), [delivery(to="ada@example.org")], settings=settings_of(relay))
    assert result.outcome == AttemptOutcome.PERMANENT_FAILURE
    assert result.error.startswith("Outcome unknown, given up")


def test_auth_over_starttls_with_a_self_signed_certificate_trusted_through_smtp_ca_file(settings, tmp_path):
    cert, key = self_signed(tmp_path)
    settings.SMTP_CA_FILE = str(cert)
    relay = Relay(**{**RELAY.__dict__, "username": "mailer", "password": "s3cret"})
    with smtp_server(Accepting(), tls=(cert, key), auth=("mailer", "s3cret")) as server:
        url = f"smtp://localhost:{server.port}/"
        (ok,) = send_all(url, [delivery(to="ada@example.org")], settings=settings_of(relay))
        wrong = Relay(**{**relay.__dict__, "password": "wrong"})
        (refused,) = send_all(url, [delivery(to="ada@example.org")], settings=settings_of(wrong))
    assert ok.outcome == AttemptOutcome.DELIVERED
    # a refused login is the relay refusing us, as an HTTP 401: the endpoint's health hears it
    assert refused.signal == Signal.REFUSAL, (refused.error, refused.detail)
    assert refused.error == "SMTP 535 at AUTH"
    assert len(server.handler.taken) == 1


def test_a_certificate_not_trusted_is_no_delivery(tmp_path):
    cert, key = self_signed(tmp_path)
    with smtp_server(Accepting(), tls=(cert, key)) as server:
        (result,) = send_all(f"smtp://localhost:{server.port}/", [delivery(to="ada@example.org")])
    assert result.outcome == AttemptOutcome.TRANSIENT_FAILURE
    assert result.signal == Signal.FAILURE
    assert server.handler.taken == []


def test_a_relay_behind_us_is_refused_without_a_connection():
    async def run() -> SendResult:
        transport = SmtpTransport(timeout=5, policy=ReceiverPolicy(allow_http=False, allowed_networks=()))
        await transport.open()
        try:
            return await transport.send(
                delivery(to="a@example.org"), url="smtps://169.254.169.254:465/", settings=settings_of()
            )
        finally:
            await transport.close()

    result = asyncio.run(run())
    assert result.refused
    assert "metadata" in result.error


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("smtps://relay.example.com:465/", True),
        ("smtp://relay.example.com:587/", True),
        ("smtp+plain://relay.example.com:25/", False),  # no TLS: development only
        ("smtps://169.254.169.254/", False),
        ("smtps://10.0.0.5/", False),
        ("smtps://relay.example.com:0/", False),
        ("smtps://user:pw@relay.example.com/", False),
        ("https://relay.example.com/", False),
    ],
)
def test_relay_urls_refused_before_dns(url, allowed):
    assert (
        relay_url_refusal(url=url, policy=ReceiverPolicy(allow_http=False, allowed_networks=())) is None
    ) is allowed


NASTY_NAMES = [
    "Ada\r\nBcc: victim@example.net",
    "Ada\nBcc: victim@example.net",
    "Ada\x00Bcc",
    "\u202eAda\u200f Lovelace",
    "🎂 Ada 🎉",
    "A" * 200,
    "Zoë Ångström-Łukasiewicz",
]


@pytest.mark.parametrize("name", NASTY_NAMES)
def test_a_name_arrives_as_one_message_with_only_the_intended_headers(name):
    with smtp_server(Accepting()) as server:
        (result,) = send_all(server.url(), [delivery(to="ada@example.org", first_name=name)])
    assert result.outcome == AttemptOutcome.DELIVERED
    (taken,) = server.handler.taken
    assert taken.rcpt_tos == ["ada@example.org"]
    message = taken.message
    assert sorted(message.keys()) == sorted(
        [
            "Subject",
            "From",
            "To",
            "Reply-To",
            "Date",
            "Message-ID",
            "Auto-Submitted",
            "List-Id",
            "List-Unsubscribe",
            "List-Unsubscribe-Post",
            "MIME-Version",
            "Content-Type",
        ]
    )
    assert "Bcc" not in message
    subject = message["Subject"]
    assert "\r" not in subject and "\n" not in subject and "\x00" not in subject
    assert "\u202e" not in subject
    assert len(subject) <= 200
    # What can be kept is kept: the letters and the emoji of the name
    if name.startswith("Zoë") or "🎂" in name:
        assert name.split()[0] in subject or name.split()[1] in subject
    # the raw bytes are ASCII (RFC 2047 words): no relay needs SMTPUTF8 for a name
    assert taken.content.isascii()
    body = message.get_body(("plain",)).get_content()
    assert "\x00" not in body


def test_a_non_ascii_address_goes_with_smtputf8_where_the_relay_offers_it():
    with smtp_server(Accepting()) as server:
        (result,) = send_all(server.url(), [delivery(to="zoë@example.org")])
    assert result.outcome == AttemptOutcome.DELIVERED
    (taken,) = server.handler.taken
    assert taken.rcpt_tos == ["zoë@example.org"]
    assert taken.message["To"] == "zoë@example.org"


def test_the_message_id_is_the_same_on_every_try_and_a_valid_msg_id():
    key = "0123456789abcdef0123456789abcdef"
    first = message_id(idempotency_key=key, from_address="a@example.com")
    assert first == message_id(idempotency_key=key, from_address="a@example.com") == f"<{key}@example.com>"
    parsed = default_policy.header_factory("Message-ID", first)
    assert str(parsed) == first
