"""Serving a long-running process's own Prometheus metrics on a port of its own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server


class MetricsPortUnavailable(RuntimeError):
    """The metrics port could not be bound (in use, or not ours to bind)."""


@contextmanager
def metrics_served(*, port: int, address: str) -> Iterator[WSGIServer | None]:
    """Serve this process's metrics (the default registry) while the block runs; port 0: not at all.

    Served from a daemon thread, and shut down when the block ends, so a
    command run in-process (tests) leaves no listener behind.
    """
    if not port:
        yield None
        return
    try:
        server, _thread = start_http_server(port, addr=address)
    except OSError as exc:
        raise MetricsPortUnavailable(
            f"Cannot serve metrics on {address}:{port}: {exc.strerror or exc}"
        ) from exc
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
