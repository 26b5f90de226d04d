"""The product's API under gunicorn on a free port, and a token to call it with."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from dataclasses import dataclass

from bench.harness import Harness
from bench.receiver import free_port


@dataclass(frozen=True)
class ApiServer:
    process: subprocess.Popen
    port: int


def gunicorn_start(harness: Harness, *, settings_module: str) -> ApiServer:
    """gunicorn config.wsgi with two sync workers and `settings_module`, once it accepts connections."""
    port = free_port()
    env = harness.env(DJANGO_SETTINGS_MODULE=settings_module)
    p = harness.processes.spawn(
        "gunicorn",
        ["-m", "gunicorn", "config.wsgi", "-w", "2", "-b", f"127.0.0.1:{port}", "--log-level", "warning"],
        env=env,
    )
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            time.sleep(0.5)
            return ApiServer(process=p, port=port)
        except OSError:
            if p.poll() is not None:
                raise RuntimeError("gunicorn died; see raw/gunicorn.log") from None
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not start")


def api_token(harness: Harness) -> str:
    """The DRF token of the superuser `bench`, made if missing."""
    r = harness.manage(
        "shell",
        "-c",
        (
            "from django.contrib.auth import get_user_model as g; "
            "g().objects.filter(username='bench').exists() or g().objects.create_superuser('bench', email='', password=None)"
        ),
    )
    if r.returncode:
        raise RuntimeError(r.stderr)
    r = harness.manage("drf_create_token", "bench")
    m = re.search(r"token ([0-9a-f]{40})", r.stdout)
    if not m:
        raise RuntimeError("no token: " + r.stdout + r.stderr)
    return m.group(1)
