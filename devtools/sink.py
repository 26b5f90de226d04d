"""A local webhook receiver: shows what the product sends, and plays the receiver in tests.

`python -m devtools.sink --port 8001` prints every message it receives and lists
the latest on http://127.0.0.1:8001/. Tests use `WebhookSink` in-process with a
`respond` hook to answer 500s, hang, or ask for a Retry-After.
"""

from __future__ import annotations

import argparse
import html
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
    ) -> None:
        self.respond = respond or (lambda received: Reply())
        self.echo = echo
        self.keep = keep
        self.received: list[Received] = []
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
            message = received.body.get("message") if isinstance(received.body, dict) else received.body
            print(
                f"{time.strftime('%H:%M:%S')} {received.status} {received.idempotency_key} {message}",
                flush=True,
            )

    def keys(self) -> list[str]:
        with self.lock:
            return [r.idempotency_key for r in self.received]

    def render_page(self) -> str:
        with self.lock:
            latest = list(reversed(self.received[-200:]))
        rows = "".join(
            f"<tr><td>{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(r.received_at))}</td>"
            f"<td>{r.status}</td><td><code>{html.escape(r.idempotency_key)}</code></td>"
            f"<td>{html.escape(r.body.get('message', '') if isinstance(r.body, dict) else str(r.body))}</td></tr>"
            for r in latest
        )
        return (
            "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=2>"
            "<title>Webhook sink</title><style>body{font-family:sans-serif;margin:2em}"
            "td,th{padding:.3em .8em;text-align:left;border-bottom:1px solid #ddd}</style>"
            f"<h1>Webhook sink</h1><p>{len(latest)} most recent messages (refreshes every 2 s).</p>"
            f"<table><tr><th>Received</th><th>Status</th><th>Idempotency key</th><th>Message</th></tr>{rows}</table>"
        )

    def start(self) -> WebhookSink:
        # stop() waits for the serving loop to look at its stop flag, which it does once
        # per poll interval (half a second by default): the tests stop a sink after each
        # test, so a short interval is what makes stopping one immediate.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> WebhookSink:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description="Print webhooks as they arrive; list them on a page.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    args = parser.parse_args()
    sink = WebhookSink(host=args.host, port=args.port, echo=True, keep=1000)
    print(f"Webhook sink listening on http://{args.host}:{args.port}/ (POST /webhook)", flush=True)
    try:
        sink.server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
