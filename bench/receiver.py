"""The benchmark's receiver: a Debian nginx with a generated config, counting by access log.

One free port answers `return 200` at once; a second one holds every request 50 ms
(`echo_sleep` from libnginx-mod-http-echo) before answering. Both write one line
per request ($msec, X-Idempotency-Key, status) to one buffered access log, which
is the benchmark's truth for what arrived.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")

CONF = """\
{load_echo}
user root;
worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    log_format keys '$msec $http_x_idempotency_key $status';
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    client_body_buffer_size 64k;
    server {{
        listen 127.0.0.1:{port};
        access_log {tmp}/access.log keys buffer=256k flush=100ms;
        location = /webhook {{ default_type application/json; return 200 '{{"ok":true}}'; }}
    }}
    server {{
        listen 127.0.0.1:{port_slow};
        access_log {tmp}/access.log keys buffer=256k flush=100ms;
        location = /webhook {{
            default_type application/json;
            {slow_body}
        }}
    }}
}}
"""


def free_port() -> int:
    """A port nobody listens on now (the machine is shared: fixed ports collide)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.port_slow = free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-nginx-"))
        self.log_path = self.tmp / "access.log"
        self.proc: subprocess.Popen | None = None
        self.slow_mode = "echo_sleep" if ECHO_MODULE.exists() else None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhook"

    @property
    def url_slow(self) -> str:
        return f"http://127.0.0.1:{self.port_slow}/webhook"

    def start(self) -> "Receiver":
        if self.slow_mode is None:
            raise RuntimeError(f"{ECHO_MODULE} missing: apt-get install libnginx-mod-http-echo")
        conf = CONF.format(
            load_echo=f"load_module {ECHO_MODULE};",
            tmp=self.tmp,
            port=self.port,
            port_slow=self.port_slow,
            # echo_read_request_body consumes the POST body so keep-alive stays in sync.
            slow_body="echo_read_request_body; echo_sleep 0.05; echo '{\"ok\":true}';",
        )
        (self.tmp / "nginx.conf").write_text(conf)
        self.proc = subprocess.Popen(
            ["nginx", "-p", str(self.tmp), "-c", str(self.tmp / "nginx.conf"), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=open(self.tmp / "stderr.log", "w"),
        )
        import socket

        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                socket.create_connection(("127.0.0.1", self.port_slow), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError((self.tmp / "stderr.log").read_text() + (self.tmp / "error.log").read_text() if (self.tmp / "error.log").exists() else "")
                time.sleep(0.05)
        raise RuntimeError("nginx did not start")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def reader(self) -> "LogReader":
        time.sleep(0.25)  # let the previous run's buffered lines land before taking the offset
        return LogReader(self.log_path)


class LogReader:
    """Reads access-log lines appended since it was made: (arrival epoch, key, status)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""
        self.rows: list[tuple[float, str, int]] = []

    def poll(self) -> int:
        if not self.path.exists():
            return 0
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        new = 0
        for line in lines:
            parts = line.split(b" ")
            if len(parts) >= 3:
                self.rows.append((float(parts[0]), parts[1].decode(), int(parts[2])))
                new += 1
        return new

    def wait_for(self, expected: set[str], *, timeout: float, on_tick=None, tick: float = 0.1) -> dict:
        """Poll until every expected key arrived (or timeout); return the receiver's count."""
        seen: set[str] = set()
        deadline = time.monotonic() + timeout
        while True:
            before = len(self.rows)
            self.poll()
            for _, key, _ in self.rows[before:]:
                if key in expected:
                    seen.add(key)
            if on_tick:
                on_tick(len(seen))
            if len(seen) >= len(expected) or time.monotonic() > deadline:
                break
            time.sleep(tick)
        time.sleep(0.3)  # late duplicates, if any, must be counted too
        self.poll()
        return self.count(expected)

    def count(self, expected: set[str]) -> dict:
        arrivals: dict[str, float] = {}
        total = 0
        non_200 = 0
        for msec, key, status in self.rows:
            if key not in expected:
                continue
            total += 1
            if status != 200:
                non_200 += 1
            if key not in arrivals or msec < arrivals[key]:
                arrivals[key] = msec
        return {
            "expected": len(expected),
            "unique": len(arrivals),
            "duplicates": total - len(arrivals),
            "missing": len(expected) - len(arrivals),
            "non_200": non_200,
            "first_arrival": min(arrivals.values()) if arrivals else None,
            "last_arrival": max(arrivals.values()) if arrivals else None,
            "arrivals": arrivals,
        }
