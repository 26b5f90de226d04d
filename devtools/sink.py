"""A local webhook receiver and mail relay: shows what the product sends, and plays the receiver in tests.

`python -m devtools.sink --port 8001 --smtp-port 8025` prints every message it receives,
POSTed or mailed, and lists the latest on http://127.0.0.1:8001/: a chat body as the text
the channel would show, a mail with its From, To, Subject, text part and the headers that
decide how it is treated. Tests use `WebhookSink` in-process with a `respond` hook to answer
500s, hang, or ask for a Retry-After.
"""

from __future__ import annotations

import argparse
import email
import email.policy
import html
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult

# Linux's SO_TIMESTAMP (and SCM_TIMESTAMP), which Python's socket module does not name.
SO_TIMESTAMP = 29
_TIMEVAL = struct.Struct("@ll")


def _stamp_arrivals(sock: socket.socket) -> bool:
    """Have the kernel note when each packet on `sock` arrived; whether it can (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMP, 1)
    except OSError:
        return False
    return True


def _arrival(sock: socket.socket) -> float | None:
    """When the kernel received the bytes at the head of `sock`'s queue (waiting for some); None if closed."""
    try:
        data, ancillary, _, _ = sock.recvmsg(1, socket.CMSG_SPACE(_TIMEVAL.size), socket.MSG_PEEK)
    except OSError:
        return None
    for level, kind, value in ancillary:
        if data and level == socket.SOL_SOCKET and kind == SO_TIMESTAMP:
            seconds, microseconds = _TIMEVAL.unpack(value[: _TIMEVAL.size])
            return seconds + microseconds / 1e6
    return None


@dataclass
class Received:
    idempotency_key: str
    body: dict | str
    headers: dict[str, str]
    raw_body: bytes
    # time.time() when the request's first bytes reached this host (the kernel's stamp, on Linux): a
    # sink whose threads wait for a busy CPU still counts each request in the second it arrived.
    received_at: float
    status: int = 200
    client_port: int = 0  # the sender's port: the same one for every request on a kept-alive connection


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b'{"ok":true}'
    delay: float = 0.0  # seconds to hold the request before answering
    # The status line's reason phrase (None: the standard one). A receiver may write anything there.
    reason: str | None = None


# The headers of a mail that say how a mail client and a relay treat it, shown with each mail.
MAIL_HEADERS = ("Message-ID", "List-Unsubscribe", "List-Unsubscribe-Post", "Auto-Submitted")


@dataclass
class Mail:
    """One message the sink took over SMTP, parsed."""

    mail_from: str  # the envelope's sender (MAIL FROM)
    rcpt_tos: list[str]  # the envelope's recipients (RCPT TO)
    message: EmailMessage
    received_at: float

    def header(self, name: str) -> str:
        return str(self.message.get(name, ""))

    @property
    def text(self) -> str:
        """The text part (the plain one of an alternative); "" when there is none."""
        part = self.message.get_body(preferencelist=("plain",))
        # As sent over SMTP, lines end in CRLF; shown, in \n.
        return part.get_content().replace("\r\n", "\n") if part is not None else ""


def _card_texts(element: object) -> list[str]:
    """The texts an Adaptive Card's element (or a Slack block) shows, in order."""
    if isinstance(element, list):
        return [text for item in element for text in _card_texts(item)]
    if not isinstance(element, dict):
        return []
    texts = []
    text = element.get("text")
    if isinstance(text, str):
        texts.append(text)
    elif isinstance(text, dict):  # a Slack block's text object
        texts.extend(_card_texts(text))
    # The children of containers: Teams' rich text runs, containers' items, column sets' columns;
    # Slack's section fields and context elements.
    for key in ("inlines", "items", "columns", "body", "fields", "elements"):
        texts.extend(_card_texts(element.get(key)))
    return texts


def shown_text(body: dict | str) -> str:
    """What a person would read of a POSTed body: the standard payload's message, a chat's text.

    Slack's `text` (or its blocks), Discord's `content`, a Teams Workflows card's text blocks,
    a connector card's `text`, a standard digest's heading and lines; a body of another shape
    as its JSON, so that nothing shows as a blank line.
    """
    if isinstance(body, str):
        return body
    for key in ("message", "text", "content"):
        if isinstance(body.get(key), str) and body[key]:
            return body[key]
    if "occurrences" in body and isinstance(body.get("heading"), str):
        lines = [o.get("line", "") for o in body["occurrences"] if isinstance(o, dict)]
        return "\n".join([body["heading"], *lines])
    texts = _card_texts(body.get("blocks"))
    for attachment in body.get("attachments") or []:
        if isinstance(attachment, dict):
            texts.extend(_card_texts(attachment.get("content")))
    return "\n".join(texts) if texts else json.dumps(body, ensure_ascii=False)


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _mail_row(mail: Mail) -> str:
    headers = "".join(
        f"<dt>{name}</dt><dd>{html.escape(mail.header(name))}</dd>"
        for name in MAIL_HEADERS
        if mail.header(name)
    )
    to = mail.header("To") or ", ".join(mail.rcpt_tos)
    return (
        f"<tr><td>{_when(mail.received_at)}</td><td>{html.escape(mail.header('From') or mail.mail_from)}</td>"
        f"<td>{html.escape(to)}</td><td>{html.escape(mail.header('Subject'))}</td>"
        f"<td class=text>{html.escape(mail.text)}</td><td><dl>{headers}</dl></td></tr>"
    )


class _MailHandler:
    """aiosmtpd's handler: every message is taken (250) and stored, parsed, with the sink."""

    def __init__(self, sink: WebhookSink) -> None:
        self.sink = sink

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802
        message = email.message_from_bytes(
            envelope.original_content or envelope.content, policy=email.policy.default
        )
        assert isinstance(message, EmailMessage)  # what policy.default makes
        self.sink._store_mail(
            Mail(
                mail_from=envelope.mail_from or "",
                rcpt_tos=list(envelope.rcpt_tos),
                message=message,
                received_at=time.time(),
            )
        )
        return "250 Message accepted for delivery"


def _any_login(server, session, envelope, mechanism, auth_data) -> AuthResult:
    # A relay with a user and password configured reaches the sink too: it takes any.
    return AuthResult(success=True)


class WebhookSink:
    """A threaded HTTP server that records every POST and answers via `respond`."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        respond: Callable[[Received], Reply] | None = None,
        echo: bool = False,
        keep: int | None = None,
        smtp_port: int | None = None,
    ) -> None:
        """`smtp_port`: also take mail over SMTP on `host` at that port (tests: devtools.ports.free_port(),
        since aiosmtpd checks the port it was given once it listens); None: no SMTP."""
        self.respond = respond or (lambda received: Reply())
        self.echo = echo
        self.keep = keep
        self.received: list[Received] = []
        self.mail: list[Mail] = []
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver would
            arrived_at: float | None = None

            def setup(self):
                super().setup()
                self.stamped = _stamp_arrivals(self.connection)

            def handle_one_request(self):
                # Before the request is read: its first bytes' arrival (no pipelining, so none are buffered).
                self.arrived_at = _arrival(self.connection) if self.stamped else None
                super().handle_one_request()

            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                received = Received(
                    idempotency_key=self.headers.get("X-Idempotency-Key", ""),
                    body=body,
                    headers={k: v for k, v in self.headers.items()},
                    raw_body=raw,
                    received_at=self.arrived_at or time.time(),
                    client_port=self.client_address[1],
                )
                reply = sink.respond(received)
                received.status = reply.status
                sink._store(received)
                if reply.delay:
                    time.sleep(reply.delay)
                try:
                    self.send_response(reply.status, reply.reason)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender gave up waiting (timeout): that is the point

            def do_GET(self):  # noqa: N802
                page = sink.render_page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format, *args):  # the sink prints its own lines
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.thread: threading.Thread | None = None
        self.smtp: Controller | None = None
        if smtp_port is not None:
            self.smtp = Controller(
                _MailHandler(self),
                hostname=host,
                port=smtp_port,
                # Names and subjects beyond ASCII arrive as a relay would take them.
                enable_SMTPUTF8=True,
                # Plain SMTP on this machine, with or without a user and password.
                authenticator=_any_login,
                auth_require_tls=False,
            )

    @property
    def smtp_address(self) -> tuple[str, int]:
        """The host and port the sink takes mail at."""
        if self.smtp is None:
            raise RuntimeError("the sink takes no mail: give it an smtp_port")
        return self.smtp.hostname, self.smtp.port

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/webhook"

    def _store(self, received: Received) -> None:
        with self.lock:
            self.received.append(received)
            if self.keep and len(self.received) > self.keep:
                del self.received[: len(self.received) - self.keep]
        if self.echo:
            message = shown_text(received.body)
            print(
                f"{time.strftime('%H:%M:%S')} {received.status} {received.idempotency_key} {message}",
                flush=True,
            )

    def _store_mail(self, mail: Mail) -> None:
        with self.lock:
            self.mail.append(mail)
            if self.keep and len(self.mail) > self.keep:
                del self.mail[: len(self.mail) - self.keep]
        if self.echo:
            print(
                f"{time.strftime('%H:%M:%S')} mail to {', '.join(mail.rcpt_tos)}: {mail.header('Subject')} "
                f"{mail.header('Message-ID')}",
                flush=True,
            )

    def keys(self) -> list[str]:
        with self.lock:
            return [r.idempotency_key for r in self.received]

    def render_page(self) -> str:
        with self.lock:
            latest = list(reversed(self.received[-200:]))
            mail = list(reversed(self.mail[-200:]))
        rows = "".join(
            f"<tr><td>{_when(r.received_at)}</td>"
            f"<td>{r.status}</td><td><code>{html.escape(r.idempotency_key)}</code></td>"
            f"<td class=text>{html.escape(shown_text(r.body))}</td></tr>"
            for r in latest
        )
        mail_section = ""
        if self.smtp is not None:
            host, port = self.smtp_address
            mail_rows = "".join(_mail_row(m) for m in mail)
            mail_section = (
                f"<h2>Mail</h2><p>{len(mail)} most recent messages taken over SMTP at {host}:{port}.</p>"
                "<table><tr><th>Received</th><th>From</th><th>To</th><th>Subject</th><th>Text</th>"
                f"<th>Headers</th></tr>{mail_rows}</table>"
            )
        return (
            "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=2>"
            "<meta name=viewport content='width=device-width, initial-scale=1'>"
            "<title>Webhook sink</title><style>body{font-family:sans-serif;margin:1em}"
            "td,th{padding:.3em .8em;text-align:left;vertical-align:top;border-bottom:1px solid #ddd}"
            ".text{white-space:pre-wrap;overflow-wrap:anywhere}table{max-width:100%}"
            "dl{margin:0;font-size:.85em}dt{font-weight:bold}dd{margin:0 0 .3em;overflow-wrap:anywhere}</style>"
            "<h1>Webhook sink</h1><p>Refreshes every 2 s.</p>"
            f"{mail_section}"
            f"<h2>Webhooks</h2><p>{len(latest)} most recent messages POSTed to /webhook.</p>"
            f"<table><tr><th>Received</th><th>Status</th><th>Idempotency key</th><th>Message</th></tr>{rows}</table>"
        )

    def start(self) -> WebhookSink:
        if self.smtp is not None:
            self.smtp.start()
        # stop() waits for the serving loop to look at its stop flag, which it does once
        # per poll interval (half a second by default): the tests stop a sink after each
        # test, so a short interval is what makes stopping one immediate.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.smtp is not None:
            self.smtp.stop()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> WebhookSink:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    parser = argparse.ArgumentParser(
        description="Print webhooks and mail as they arrive; list them on a page."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--smtp-port", type=int, default=None, help="also take mail over SMTP at this port")
    args = parser.parse_args()
    sink = WebhookSink(host=args.host, port=args.port, echo=True, keep=1000, smtp_port=args.smtp_port)
    print(f"Webhook sink listening on http://{args.host}:{args.port}/ (POST /webhook)", flush=True)
    if sink.smtp is not None:
        sink.smtp.start()
        print(f"Mail sink listening on {args.host}:{args.smtp_port} (SMTP, no TLS, any login)", flush=True)
    try:
        sink.server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        if sink.smtp is not None:
            sink.smtp.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
