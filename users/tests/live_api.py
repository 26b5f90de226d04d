"""The API under gunicorn on a free port, as deployed, and requests to it over a real socket."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools.ports import free_port

BASE_DIR = Path(__file__).resolve().parents[2]


@contextmanager
def api_server(*, env: dict, log_path: Path, workers: int, threads: int) -> Iterator[int]:
    """gunicorn serving config.wsgi with `env` until the block ends; yields its port once it accepts connections."""
    port = free_port()
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--bind",
                f"127.0.0.1:{port}",
                "config.wsgi",
            ],
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError(log_path.read_text()) from None
                time.sleep(0.1)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


def request(port: int, token: str, method: str, path: str, body=None, headers=None, chunked=False):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    all_headers = {"Authorization": f"Token {token}", "Content-Type": "application/json", **(headers or {})}
    if chunked:
        conn.request(
            method, path, body=iter([json.dumps(body).encode()]), headers=all_headers, encode_chunked=True
        )
    else:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=all_headers)
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response.status, response.headers, payload
