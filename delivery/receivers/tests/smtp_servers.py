"""Real local SMTP servers (aiosmtpd) for the email transport's tests and bench: each keeps what it took.

`smtp_server(handler)` runs one on 127.0.0.1 in a thread of its own and yields it; its
handler decides the replies:

- Accepting: 250 to everything; keeps each message (envelope and bytes);
- Greylisting: 451 to the first RCPT of each address, then 250;
- Refusing: 550 at RCPT for the addresses it is given, 250 for the others;
- Dropping: for the first message of each Message-ID, closes the connection after the
  final dot without a reply; takes the second;

and `tls=` with `auth=` makes one that offers STARTTLS and wants AUTH over it (a
self-signed certificate for 127.0.0.1 made here: `self_signed`).
"""

from __future__ import annotations

import datetime
import email
import email.policy
import ipaddress
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from pathlib import Path

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Taken:
    mail_from: str
    rcpt_tos: list[str]
    content: bytes

    @property
    def message(self) -> EmailMessage:
        parsed = email.message_from_bytes(self.content, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


@dataclass
class Accepting:
    taken: list[Taken] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802 - aiosmtpd's hook
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook
        with self.lock:
            self.taken.append(Taken(envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content))
        return "250 Message accepted for delivery"

    def message_ids(self) -> Counter[str]:
        """How many messages each Message-ID came in (the servers' count, per Message-ID)."""
        with self.lock:
            return Counter(str(taken.message["Message-ID"]) for taken in self.taken)

    def to(self) -> Counter[str]:
        with self.lock:
            return Counter(address for taken in self.taken for address in taken.rcpt_tos)


@dataclass
class Greylisting(Accepting):
    seen: set[str] = field(default_factory=set)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        if address not in self.seen:
            self.seen.add(address)
            return "451 4.7.1 Greylisted, try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"


@dataclass
class Refusing(Accepting):
    refused: frozenset[str] = frozenset()
    refusals: Counter[str] = field(default_factory=Counter)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        if address in self.refused:
            self.refusals[address] += 1
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"


@dataclass
class Dropping(Accepting):
    dropped: Counter[str] = field(default_factory=Counter)

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        message_id = str(
            email.message_from_bytes(envelope.original_content, policy=email.policy.default)["Message-ID"]
        )
        with self.lock:
            first = message_id not in self.dropped
            if first:
                self.dropped[message_id] += 1
        if first:
            # The message is in, the reply never comes: the sender cannot know (RFC 1047).
            server.transport.close()
            return "250 never sent"
        return await super().handle_DATA(server, session, envelope)


@dataclass
class SmtpServer:
    host: str
    port: int
    handler: Accepting

    def url(self, scheme: str = "smtp+plain") -> str:
        return f"{scheme}://{self.host}:{self.port}/"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost, signed by itself, and its key: (cert.pem, key.pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def smtp_server(
    handler: Accepting | None = None,
    *,
    tls: tuple[Path, Path] | None = None,
    auth: tuple[str, str] | None = None,
) -> Iterator[SmtpServer]:
    """An aiosmtpd server on 127.0.0.1 with `handler` (Accepting by default), stopped on exit.

    `tls`: (cert, key) it offers STARTTLS with, and requires; `auth`: the one (user, password)
    it takes, only over TLS.
    """
    handler = handler or Accepting()
    options: dict = {}
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        options.update(tls_context=context, require_starttls=True)
    if auth is not None:

        def authenticator(server, session, envelope, mechanism, auth_data):
            ok = (
                isinstance(auth_data, LoginPassword)
                and (auth_data.login.decode(), auth_data.password.decode()) == auth
            )
            return AuthResult(success=ok, handled=False)

        options.update(authenticator=authenticator, auth_required=True, auth_require_tls=True)
    port = _free_port()
    controller = Controller(handler, hostname="127.0.0.1", port=port, enable_SMTPUTF8=True, **options)
    controller.start()
    try:
        yield SmtpServer(host="127.0.0.1", port=port, handler=handler)
    finally:
        controller.stop()
