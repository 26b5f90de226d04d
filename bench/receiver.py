"""The benchmark's receiver: a Debian nginx with a generated config, counting by access log.

One free port answers `return 200` at once; a second one holds every request 50 ms
(`echo_sleep` from libnginx-mod-http-echo) before answering; a third one has one
location per latency of the `receivers` workload (/ms/0, /ms/50, /ms/250, /ms/1000:
`return 200`, or `echo_sleep` that long) and nginx's stub_status at /status. All
write one line per request ($msec, X-Idempotency-Key, status, $request_time) to one
buffered access log, which is the benchmark's truth for what arrived; $msec (when
the request ended) minus $request_time (since its first byte was read) gives each
request's interval at the receiver, hence how many were open at once.

Three more free ports are the `destinations` workload's receivers, one per
destination: each answers `return 200` at /webhook as the first one does, and
logs to an access log of its own, since every destination gets the same
idempotency key for an occurrence and only where a line was written says which
destination it was sent to.
"""

from __future__ import annotations

import resource
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ECHO_MODULE = Path("/usr/lib/nginx/modules/ngx_http_echo_module.so")
# The `receivers` workload's latencies (ms), one location each on the third port.
LATENCIES_MS = (0, 50, 250, 1000)

CONF = """\
{load_echo}
user root;
worker_processes 1;
# At 1,000 ms and ~3,000 deliveries/s some 3,000 requests are open at once (and a
# reference client may hold 4,096 connections): room for all of them, each one fd.
worker_rlimit_nofile {nofile};
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections {connections}; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    log_format keys '$msec $http_x_idempotency_key $status $request_time';
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
    server {{
        # A backlog for thousands of connections opened at once (somaxconn caps it).
        listen 127.0.0.1:{port_lat} backlog=4096;
        access_log {tmp}/access.log keys buffer=256k flush=100ms;
        location = /status {{ stub_status; access_log off; }}
{latency_locations}
    }}
{destination_servers}
}}
"""

# The `destinations` workload's receivers: this many ports, one per destination.
DESTINATIONS = 3

DESTINATION_SERVER = """\
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        access_log {log} keys buffer=256k flush=100ms;
        location = /webhook {{ default_type application/json; return 200 '{{"ok":true}}'; }}
    }}"""


def latency_location(ms: int) -> str:
    if ms == 0:
        return """        location = /ms/0 { default_type application/json; return 200 '{"ok":true}'; }"""
    return (
        f"        location = /ms/{ms} {{ default_type application/json; "
        f"echo_read_request_body; echo_sleep {ms / 1000:g}; echo '{{\"ok\":true}}'; }}"
    )


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port nobody listens on now (the machine is shared: fixed ports collide), and none handed out before
    in this run: the kernel may offer a port it just offered again, and two processes given one port
    collide (two workers' --metrics-port, seen: "Address already in use")."""
    import socket

    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class Receiver:
    def __init__(self) -> None:
        self.port = free_port()
        self.port_slow = free_port()
        self.port_lat = free_port()
        self.ports_destination = [free_port() for _ in range(DESTINATIONS)]
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

    def url_latency(self, ms: int) -> str:
        """The `receivers` workload's endpoint answering 200 after `ms` (one of LATENCIES_MS)."""
        if ms not in LATENCIES_MS:
            raise ValueError(f"no receiver location for {ms} ms; one of {LATENCIES_MS}")
        return f"http://127.0.0.1:{self.port_lat}/ms/{ms}"

    def url_destination(self, i: int) -> str:
        """The `destinations` workload's receiver number `i` (0 to DESTINATIONS - 1), answering 200 at once."""
        return f"http://127.0.0.1:{self.ports_destination[i]}/webhook"

    def destination_log(self, i: int) -> Path:
        return self.tmp / f"destination-{i + 1}.log"

    def status(self) -> dict[str, int]:
        """nginx stub_status: active connections, and those reading / writing / waiting (idle keep-alive)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port_lat}/status", timeout=2) as r:
            words = r.read().decode().split()
        return {
            "active": int(words[2]),
            "reading": int(words[11]),
            "writing": int(words[13]),
            "waiting": int(words[15]),
        }

    def start(self) -> Receiver:
        if self.slow_mode is None:
            raise RuntimeError(f"{ECHO_MODULE} missing: apt-get install libnginx-mod-http-echo")
        # Each connection is one fd; nginx may raise its own soft limit up to the hard one.
        nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
        if nofile == resource.RLIM_INFINITY or nofile < 0:
            nofile = 65536
        conf = CONF.format(
            load_echo=f"load_module {ECHO_MODULE};",
            tmp=self.tmp,
            port=self.port,
            port_slow=self.port_slow,
            port_lat=self.port_lat,
            nofile=nofile,
            connections=max(1024, min(16384, nofile - 64)),
            latency_locations="\n".join(latency_location(ms) for ms in LATENCIES_MS),
            destination_servers="\n".join(
                DESTINATION_SERVER.format(port=port, log=self.destination_log(i))
                for i, port in enumerate(self.ports_destination)
            ),
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
                socket.create_connection(("127.0.0.1", self.port_lat), timeout=0.2).close()
                for port in self.ports_destination:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        (self.tmp / "stderr.log").read_text() + (self.tmp / "error.log").read_text()
                        if (self.tmp / "error.log").exists()
                        else ""
                    ) from None
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

    def reader(self) -> LogReader:
        time.sleep(0.25)  # let the previous run's buffered lines land before taking the offset
        return LogReader(self.log_path)

    def destination_readers(self, count: int) -> list[LogReader]:
        """A reader of each of the first `count` destination receivers' access logs, from now on."""
        time.sleep(0.25)  # as reader(): the previous run's buffered lines land first
        return [LogReader(self.destination_log(i)) for i in range(count)]


class LogReader:
    """Reads access-log lines appended since it was made: (arrival epoch, key, status).

    `request_times[i]` is row i's $request_time (seconds the receiver held it).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""
        self.rows: list[tuple[float, str, int]] = []
        self.request_times: list[float] = []

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
                self.request_times.append(float(parts[3]) if len(parts) >= 4 else 0.0)
                new += 1
        return new

    def in_flight(self, expected: set[str]) -> dict:
        """Requests open at the receiver at once, exactly, from the log (every request for an expected key).

        Each request was open over [$msec - $request_time, $msec), both to the
        millisecond. A request held less than a millisecond (the 0 ms receiver)
        is an empty interval and counts for nothing: there the receiver holds
        next to nothing, and the connections sampled by stub_status say more.
        """
        edges: dict[int, int] = {}
        held_ms = 0
        first = last = None
        for (msec, key, _), rt in zip(self.rows, self.request_times, strict=True):
            if key not in expected:
                continue
            end = round(msec * 1000)
            start = end - round(rt * 1000)
            first = start if first is None else min(first, start)
            last = end if last is None else max(last, end)
            if end > start:
                edges[start] = edges.get(start, 0) + 1
                edges[end] = edges.get(end, 0) - 1
                held_ms += end - start
        peak = open_now = 0
        for t in sorted(edges):
            open_now += edges[t]
            peak = max(peak, open_now)
        return {
            "peak": peak,
            # Little's law: the time the receiver held requests over the span they cover.
            "mean": held_ms / (last - first) if first is not None and last > first else None,
        }

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


class StatusSampler(threading.Thread):
    """Samples nginx's stub_status every `every` s: the peak of open connections and of requests being served."""

    def __init__(self, receiver: Receiver, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.receiver = receiver
        self.every = every
        self.peak = {"active": 0, "writing": 0}
        self.samples = 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                st = self.receiver.status()
            except OSError:
                st = None
            if st:
                self.samples += 1
                self.peak["active"] = max(self.peak["active"], st["active"] - 1)  # less the sampler's own
                self.peak["writing"] = max(self.peak["writing"], st["writing"] - 1)
            self.halt.wait(self.every)

    def finish(self) -> dict:
        self.halt.set()
        self.join()
        return {
            "peak_connections": self.peak["active"],
            "peak_writing": self.peak["writing"],
            "samples": self.samples,
        }
