"""The SMTP transport: an email destination's messages through its relay, many over one session.

It speaks the transport protocol (delivery.receivers.protocol) as the HTTP transport
does. The relay is the destination's URL: `smtps://host:465` (implicit TLS),
`smtp://host:587` (STARTTLS, required: a relay that does not offer it is refused),
`smtp+plain://host:25` (no TLS: only where WEBHOOK_ALLOW_HTTP allows unencrypted
receivers, i.e. development). Its user, password, From, Reply-To and fixed
addresses come with the lane's settings (LaneSettings.relay).

Sessions: each lane (one relay URL) keeps its idle sessions, and a send takes one
(or opens one: connect, EHLO, STARTTLS, EHLO again, AUTH), sends one message
(MAIL, RCPT, DATA) and gives it back; so one session carries many messages, as
many at once as the lane lets requests be open. A session is dropped after an
error, a 421, SMTP_MESSAGES_PER_SESSION messages (relays limit them) or
SMTP_IDLE_SECONDS unused.

The connection is made to an address the receiver policy allows, after DNS
(delivery.receivers.resolver), on a socket of our own that aiosmtplib is given, so
the address connected to is the one checked; TLS is verified against the relay's
name (and SMTP_CA_FILE, if set: a private CA's certificate to trust besides the
system's).

Answers (kinds.email.Email.read_smtp reads a reply at its step):

- 250 after DATA: delivered;
- 4xx: retried under the usual back-off; at RCPT or DATA it is about this message
  (greylisting), Signal.NEUTRAL, so the relay is not marked failing;
- 5xx at RCPT: this address, for good: the delivery is DEAD and the result names
  the address (`SendResult.undeliverable`), which the record marks undeliverable;
- 5xx at connect, EHLO, STARTTLS or MAIL: the relay's problem (Signal.FAILURE, the
  endpoint's health as for an HTTP receiver's 5xx); at AUTH it refuses our
  credentials (Signal.REFUSAL, as an HTTP 401);
- the connection lost after the final dot without a reply: the outcome is unknown
  (Verdict.UNKNOWN: counted in delivery_outcome_unknown_total, the attempt's error
  says so); sent again under the same Message-ID unless the destination gives
  unknowns up (Relay.resend_unknown).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import socket
import ssl
import time
import urllib.parse
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from email.headerregistry import Address
from email.message import EmailMessage
from email.policy import EmailPolicy
from typing import Any

import aiosmtplib
from aiohttp.resolver import DefaultResolver
from django.conf import settings as django_settings

from delivery.metrics import OUTCOMES_UNKNOWN
from delivery.receivers.addresses import ReceiverPolicy, address_refusal, parse_address
from delivery.receivers.lane_settings import LaneSettings, Relay
from delivery.receivers.protocol import ClaimedDelivery, SendResult, answered
from delivery.receivers.resolver import AddressRefused, ScreeningResolver
from delivery.receivers.transport import error_class
from delivery.rules.answers import Signal
from kinds import Reading, Verdict
from kinds.email import AUTH, CONNECT, DATA, EHLO, MAIL, RCPT, STARTTLS, Email, header_safe

# The kind that reads this transport's answers (an SMTP reply at its step).
EMAIL = Email()

# The relay URL's schemes: whether TLS is implicit, and whether it is used at all.
SCHEMES = {"smtps": "tls", "smtp": "starttls", "smtp+plain": "none"}
DEFAULT_PORTS = {"smtps": 465, "smtp": 587, "smtp+plain": 25}


def relay_url_refusal(*, url: str, policy: ReceiverPolicy) -> str | None:
    """What is wrong with a relay `url` before DNS (scheme, host, port, a literal address), or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError:
        return "Refused: not a relay URL with a valid port"
    if parts.scheme not in SCHEMES or not hostname:
        return "Refused: not an smtps://, smtp:// or smtp+plain:// URL with a host"
    if "@" in parts.netloc:
        return "Refused: the relay's user and password are fields of their own, not part of its URL"
    if port == 0:
        return "Refused: a port from 1 to 65535"
    if SCHEMES[parts.scheme] == "none" and not policy.allow_http:
        return "Refused: smtp+plain:// sends without TLS (WEBHOOK_ALLOW_HTTP)"
    address = parse_address(hostname)
    if address is not None:
        refusal = address_refusal(address=address, policy=policy)
        return refusal.describe() if refusal else None
    return None


@dataclass
class _Session:
    client: aiosmtplib.SMTP
    sent: int
    idle_since: float
    utf8: bool


class _Failed(Exception):
    """A step of the session failed: its reply (None: none came) and our words for it."""

    def __init__(self, step: str, code: int | None, error: str, detail: str = "") -> None:
        super().__init__(error)
        self.step, self.code, self.error, self.detail = step, code, error, detail


@dataclass
class _Attempt:
    """One message's try: where and to whom, and the session it used (None until one is opened)."""

    url: str
    relay: Relay
    recipients: list[str]
    timeout: float
    session: _Session | None = None


def _recipients_of(*, body: dict[str, Any], relay: Relay) -> tuple[list[str], bool]:
    """Whom the message goes to, and whether that is the person greeted (a personal destination's)."""
    if body.get("to"):
        return [body["to"]], True
    if relay.to:
        return list(relay.to), False
    # A personal destination's test message: to whoever answers for it (no one is greeted).
    return ([relay.reply_to or relay.from_address] if body.get("test") else []), False


def message_id(*, idempotency_key: str, from_address: str) -> str:
    """`<key@domain>`: the same for every try of one delivery (a receiving server can tell a second copy)."""
    domain = from_address.rpartition("@")[2] or "localhost"
    local = "".join(ch if ch.isalnum() or ch in "-_." else "." for ch in idempotency_key).strip(".")
    return f"<{local or 'greeting'}@{domain}>"


class _Policy(EmailPolicy):
    """email.policy.SMTP (or SMTPUTF8), but a header value that is plain (printable ASCII on one line, within
    RFC 5322's 998 characters) is kept and written as given, unfolded, instead of parsed into a tree and folded
    again. So a long List-Unsubscribe URL stays one `<https://…>` (the standard folder would cut a token
    without spaces into RFC 2047 encoded words, which no mail provider reads as a URL), and the message costs
    a fraction to build (bench/results/REPORT-email.md). Any other value (non-ASCII to encode) takes the
    standard path; a CR or LF is refused as EmailPolicy refuses it.
    """

    def header_store_parse(self, name: str, value: Any) -> tuple[str, Any]:
        if isinstance(value, str) and _plain(name, value):
            return name, value
        return super().header_store_parse(name, value)

    def _fold(self, name: str, value: Any, refold_binary: bool = False) -> str:
        if isinstance(value, str) and not hasattr(value, "name") and _plain(name, value):
            return f"{name}: {value}{self.linesep}"
        return super()._fold(name, value, refold_binary)  # type: ignore[misc]

    def header_fetch_parse(self, name: str, value: Any) -> Any:
        # The generator and set_content read Content-Type again and again: parsed once per value. Keyed by
        # the header factory, which every clone of the policy shares (the generator clones it for each part).
        if isinstance(value, str) and not hasattr(value, "name") and _plain(name, value):
            return _parsed(self.header_factory, name, value)
        return super().header_fetch_parse(name, value)


@functools.lru_cache(maxsize=1024)
def _parsed(factory: Any, name: str, value: str) -> Any:
    return factory(name, value)


def _plain(name: str, value: str) -> bool:
    return len(name) + 2 + len(value) <= 998 and value.isascii() and value.isprintable()


# 7bit: a text that is not ASCII goes quoted-printable or base64, for a relay without 8BITMIME.
_POLICY = _Policy(linesep="\r\n", cte_type="7bit")
_POLICY_UTF8 = _Policy(linesep="\r\n", utf8=True)


def message_build(
    *, delivery: ClaimedDelivery, body: dict[str, Any], relay: Relay, to: str, utf8: bool
) -> EmailMessage:
    """The MIME message (multipart/alternative: text, then HTML) of `body` to `to`, with every header we send.

    Every value that came from data (the subject, the display names) is one header line
    (kinds.email.header_safe); EmailMessage encodes what is not ASCII (RFC 2047), or keeps it
    UTF-8 where the relay offers SMTPUTF8 and an address needs it.
    """
    message = EmailMessage(policy=_POLICY_UTF8 if utf8 else _POLICY)
    local, _, domain = relay.from_address.rpartition("@")
    message["Subject"] = header_safe(body.get("subject", ""))
    from_name = header_safe(relay.from_name)
    # An ASCII name is quoted as it needs (formataddr) and kept as written; another is encoded by the policy.
    message["From"] = (
        email.utils.formataddr((from_name, relay.from_address))
        if from_name.isascii()
        else Address(display_name=from_name, username=local, domain=domain)
    )
    message["To"] = to
    if relay.reply_to:
        message["Reply-To"] = relay.reply_to
    message["Date"] = email.utils.format_datetime(datetime.now(UTC))
    message["Message-ID"] = message_id(
        idempotency_key=delivery.idempotency_key, from_address=relay.from_address
    )
    message["Auto-Submitted"] = "auto-generated"
    list_name = header_safe(relay.destination_name, limit=100).replace('"', "'")
    message["List-Id"] = f'"{list_name}" <destination-{relay.destination_id}.{domain}>'
    user_id = body.get("user_id")
    unsubscribe = relay.unsubscribe(user_id) if relay.unsubscribe is not None and user_id else ""
    if unsubscribe and unsubscribe.isascii() and not any(ch in unsubscribe for ch in "<>\r\n "):
        # RFC 8058: one POST to the URL, without cookies or a confirmation page, opts the person out.
        message["List-Unsubscribe"] = f"<{unsubscribe}>"
        message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message.set_content(body.get("text", ""))
    message.add_alternative(body.get("html", ""), subtype="html")
    return message


class SmtpTransport:
    """The SMTP transport (delivery.receivers.protocol.Transport). Open it and send from one event loop."""

    def __init__(self, *, timeout: float, policy: ReceiverPolicy | None = None) -> None:
        self.timeout = timeout
        self._policy = policy or ReceiverPolicy.from_settings()
        self._screening: ScreeningResolver | None = None
        # Idle sessions by relay URL (a lane's): the last given back is taken first (the warmest).
        self._idle: dict[str, list[_Session]] = defaultdict(list)
        self._tls: ssl.SSLContext | None = None
        self._quitting: set[asyncio.Task] = set()

    async def open(self) -> None:
        self._screening = ScreeningResolver(policy=self._policy, inner=DefaultResolver())

    async def close(self) -> None:
        for sessions in self._idle.values():
            for session in sessions:
                await _quit(session.client)
        self._idle.clear()
        if self._screening is not None:
            await self._screening.close()
            self._screening = None

    async def send(self, delivery: ClaimedDelivery, *, url: str, settings: LaneSettings) -> SendResult:
        started = (datetime.now(UTC), time.monotonic())
        relay = settings.relay
        refusal = relay_url_refusal(url=url, policy=self._policy)
        if refusal is None and relay is None:
            refusal = "Refused: an email destination without its relay settings"
        if refusal is not None:
            return answered(
                delivery, Reading(Verdict.REFUSED), started_at=started[0], started_mono=started[1],
                error=refusal, refused=True, signal=Signal.NEUTRAL,
            )  # fmt: skip
        assert relay is not None
        body = _decoded(delivery.body)
        recipients, personal = _recipients_of(body=body, relay=relay)
        if not recipients:
            return answered(
                delivery, Reading(Verdict.REFUSED, code="no_address"), started_at=started[0],
                started_mono=started[1], signal=Signal.NEUTRAL,
            )  # fmt: skip
        attempt = _Attempt(url=url, relay=relay, recipients=recipients, timeout=settings.timeout)
        try:
            await self._deliver(attempt, delivery=delivery, body=body)
        except AddressRefused as exc:
            return answered(
                delivery, Reading(Verdict.REFUSED), started_at=started[0], started_mono=started[1],
                error=str(exc), refused=True, signal=Signal.NEUTRAL,
            )  # fmt: skip
        except _Failed as failed:
            await self._after_failed_step(attempt, failed)
            return self._failure(
                delivery, failed, relay=relay, recipients=recipients, started=started, personal=personal
            )
        except (TimeoutError, OSError, aiosmtplib.SMTPException) as exc:
            if attempt.session is not None:
                attempt.session.client.close()
            error = _Failed(
                CONNECT, None, f"Connection error: {error_class(exc)}", f"{type(exc).__name__}: {exc}"[:300]
            )
            return self._failure(delivery, error, relay=relay, recipients=recipients, started=started)
        assert attempt.session is not None
        attempt.session.sent += 1
        self._give_back(url, attempt.session)
        return answered(delivery, Reading(Verdict.DELIVERED), started_at=started[0], started_mono=started[1])

    async def _deliver(self, attempt: _Attempt, *, delivery: ClaimedDelivery, body: dict[str, Any]) -> None:
        """Send the message over a session of the lane's (attempt.session: the one used, whatever happens)."""
        relay, recipients = attempt.relay, attempt.recipients
        utf8 = not all(address.isascii() for address in [relay.from_address, *recipients])
        payload: bytes | None = None
        # A session taken idle may have been closed by the relay meanwhile: its first command finds
        # out, before anything of the message was sent, and a new session is opened once.
        for fresh in (False, True):
            session = attempt.session = await self._session(
                attempt.url, relay=relay, timeout=attempt.timeout, fresh=fresh
            )
            if utf8 and not session.utf8:
                raise _Failed(MAIL, 553, "The relay offers no SMTPUTF8 for a non-ASCII address")
            if payload is None:
                payload = message_build(
                    delivery=delivery, body=body, relay=relay, to=", ".join(recipients), utf8=utf8
                ).as_bytes()
            try:
                await self._transfer(
                    session,
                    relay=relay,
                    recipients=recipients,
                    payload=payload,
                    utf8=utf8,
                    timeout=attempt.timeout,
                )
            except aiosmtplib.SMTPServerDisconnected:
                session.client.close()
                if fresh or session.sent == 0:
                    raise
                continue
            return

    async def _after_failed_step(self, attempt: _Attempt, failed: _Failed) -> None:
        """Keep the session for the next message if only this one was refused, else close it."""
        session = attempt.session
        if session is None:
            return
        if failed.code is not None and failed.step in (RCPT, DATA) and failed.code != 421:
            # One message refused, the session well: reset it and keep it for the next.
            await self._reset_or_drop(attempt.url, session)
        else:
            await _quit(session.client)

    async def _transfer(
        self,
        session: _Session,
        *,
        relay: Relay,
        recipients: list[str],
        payload: bytes,
        utf8: bool,
        timeout: float,
    ) -> None:
        """MAIL, RCPT for each recipient, DATA: one message over `session`."""
        client = session.client
        options = ["SMTPUTF8", "BODY=8BITMIME"] if utf8 else []
        encoding = "utf-8" if utf8 else "ascii"
        try:
            await _step(MAIL, client.mail(relay.from_address, options=options, encoding=encoding))
        except _Failed as failed:
            if failed.code == 421 or (failed.code is None):
                raise aiosmtplib.SMTPServerDisconnected(failed.error) from None
            raise
        for recipient in recipients:
            await _step(RCPT, client.rcpt(recipient, encoding=encoding))
        await self._data(client, payload, timeout=timeout)

    async def _reset_or_drop(self, url: str, session: _Session) -> None:
        try:
            await asyncio.wait_for(session.client.rset(), 5)
        except (TimeoutError, OSError, aiosmtplib.SMTPException):
            session.client.close()
            return
        self._give_back(url, session)

    async def _data(self, client: aiosmtplib.SMTP, payload: bytes, *, timeout: float) -> None:
        """DATA and the message; a reply other than 250 raises _Failed at DATA. A connection lost once the
        message was written (the final dot gone) raises _Failed(DATA, None): the outcome is unknown."""
        protocol = client.protocol
        assert protocol is not None
        writes = 0
        write = protocol.write

        def counted(data: bytes) -> None:
            nonlocal writes
            writes += 1
            write(data)

        protocol.write = counted  # type: ignore[method-assign]
        try:
            await client.data(payload, timeout=timeout)
        except aiosmtplib.SMTPDataError as exc:
            raise _Failed(DATA, exc.code, f"SMTP {exc.code} at DATA", exc.message[:300]) from None
        except (aiosmtplib.SMTPServerDisconnected, aiosmtplib.SMTPTimeoutError, OSError) as exc:
            if writes >= 2:  # "DATA", then the message with its final dot
                raise _Failed(DATA, None, f"no reply after the message ({error_class(exc)})") from None
            raise _Failed(MAIL, None, f"Connection error: {error_class(exc)}") from None
        finally:
            protocol.write = write  # type: ignore[method-assign]

    def _failure(
        self,
        delivery: ClaimedDelivery,
        failed: _Failed,
        *,
        relay: Relay,
        recipients: list[str],
        started: tuple[datetime, float],
        personal: bool = False,
    ) -> SendResult:
        reading = EMAIL.read_smtp(step=failed.step, code=failed.code)
        signal: Signal | None = None
        undeliverable = ""
        code = failed.code
        if code is None:
            signal = Signal.FAILURE
        elif 400 <= code < 500:
            # A greylisted address or message: about this message, not the relay.
            signal = Signal.NEUTRAL if failed.step in (RCPT, DATA) else Signal.FAILURE
        elif code >= 500:
            if failed.step == RCPT:
                signal = Signal.NEUTRAL
                # The person's own address (a personal destination's): marked undeliverable by the record.
                # A fixed address refused (an HR mailbox) is the operator's to fix: the dead delivery says so.
                undeliverable = recipients[0] if personal else ""
            elif failed.step == AUTH:
                signal = Signal.REFUSAL
                reading = Reading(Verdict.REFUSED, code="smtp_auth_refused")
            elif failed.step == DATA:
                signal = Signal.NEUTRAL
            else:
                signal = Signal.FAILURE
                reading = Reading(Verdict.RETRY, code=reading.code)
        error = failed.error
        if reading.verdict == Verdict.UNKNOWN:
            OUTCOMES_UNKNOWN.labels(transport="smtp").inc()
            if not relay.resend_unknown:
                reading = Reading(Verdict.REFUSED)
                error = f"Outcome unknown, given up (the destination does not resend): {error}"
        result = answered(
            delivery,
            reading,
            started_at=started[0],
            started_mono=started[1],
            signal=signal,
            error=error,
            detail=failed.detail,
        )
        result.undeliverable = undeliverable
        return result

    async def _session(self, url: str, *, relay: Relay, timeout: float, fresh: bool = False) -> _Session:
        """An idle session of this relay (unless `fresh`), or a new one: connected, greeted, secured and logged in."""
        idle = self._idle[url]
        now_mono = time.monotonic()
        while idle and not fresh:
            session = idle.pop()
            if (
                session.client.is_connected
                and now_mono - session.idle_since < django_settings.SMTP_IDLE_SECONDS
            ):
                return session
            await _quit(session.client)
        parts = urllib.parse.urlsplit(url)
        security = SCHEMES[parts.scheme]
        host = parts.hostname or ""
        port = parts.port or DEFAULT_PORTS[parts.scheme]
        sock = await self._connect(host, port, timeout=timeout)
        if self._tls is None and security != "none":
            # At the first relay, not at open: loading the CA store slows every worker's start,
            # and most workers never speak SMTP.
            self._tls = ssl.create_default_context(cafile=django_settings.SMTP_CA_FILE or None)
        client = aiosmtplib.SMTP(
            hostname=host,
            sock=sock,
            use_tls=security == "tls",
            start_tls=False,
            tls_context=self._tls if security != "none" else None,
            timeout=timeout,
            local_hostname=django_settings.SMTP_LOCAL_HOSTNAME or None,
        )
        try:
            await _step(CONNECT, client.connect())
            await _step(EHLO, client.ehlo())
            if security == "starttls":
                if not client.supports_extension("starttls"):
                    raise _Failed(STARTTLS, 530, "The relay offers no STARTTLS")
                await _step(STARTTLS, client.starttls(tls_context=self._tls))
                await _step(EHLO, client.ehlo())
            if relay.username:
                await _step(AUTH, client.login(relay.username, relay.password))
        except BaseException:
            client.close()
            raise
        return _Session(
            client=client, sent=0, idle_since=now_mono, utf8=client.supports_extension("smtputf8")
        )

    async def _connect(self, host: str, port: int, *, timeout: float) -> socket.socket:
        """A connected socket to an address of `host` the policy allows (AddressRefused if none)."""
        assert self._screening is not None  # open() made it
        loop = asyncio.get_running_loop()
        try:
            answers = await asyncio.wait_for(
                self._screening.resolve(host, port, family=socket.AF_UNSPEC), timeout
            )
        except AddressRefused:
            raise
        last: OSError | None = None
        for answer in answers:
            sock = socket.socket(answer["family"], socket.SOCK_STREAM)
            sock.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(sock, (answer["host"], answer["port"])), timeout)
            except (OSError, TimeoutError) as exc:
                sock.close()
                last = exc if isinstance(exc, OSError) else OSError(str(exc))
                continue
            return sock
        raise last or OSError(f"{host} resolved to no address")

    def _give_back(self, url: str, session: _Session) -> None:
        if session.sent >= django_settings.SMTP_MESSAGES_PER_SESSION or not session.client.is_connected:
            # QUIT without waiting for it; the task is held until it ends (the loop keeps only weak references).
            task = asyncio.get_running_loop().create_task(_quit(session.client))
            self._quitting.add(task)
            task.add_done_callback(self._quitting.discard)
            return
        session.idle_since = time.monotonic()
        self._idle[url].append(session)


async def _step(step: str, call: Any) -> Any:
    """Await one SMTP command, its refusal a _Failed at `step` with the reply's code."""
    try:
        return await call
    except aiosmtplib.SMTPResponseException as exc:
        raise _Failed(step, exc.code, f"SMTP {exc.code} at {step.upper()}", exc.message[:300]) from None
    except aiosmtplib.SMTPNotSupported as exc:
        raise _Failed(step, 502, f"The relay does not support {step.upper()}", str(exc)[:300]) from None


async def _quit(client: aiosmtplib.SMTP) -> None:
    try:
        if client.is_connected:
            await asyncio.wait_for(client.quit(), 2)
    except (TimeoutError, OSError, aiosmtplib.SMTPException):
        pass
    finally:
        client.close()


def _decoded(body: str) -> dict[str, Any]:
    value = json.loads(body)
    return value if isinstance(value, dict) else {}
