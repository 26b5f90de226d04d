"""A free TCP port on 127.0.0.1, for the servers tests and the bench start (sinks, gunicorn, PostgreSQL, PgBouncer)."""

import socket


def free_port() -> int:
    """A port nothing listens on now; the OS may hand it out again once closed, so bind it soon."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
