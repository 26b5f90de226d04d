"""The processes a workload starts, and the threads that watch them (memory, CPU, in-flight limits)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.locations import PRODUCT_PY, RAW, ROOT


class Processes:
    """Processes started by the harness, each logging to raw/<name>.log; stopped with SIGTERM, then SIGKILL."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen] = []

    def spawn(
        self, name: str, args: list[str], *, env: dict, python: str = PRODUCT_PY, cwd: Path = ROOT
    ) -> subprocess.Popen:
        out = open(RAW / f"{name}.log", "a")
        out.write(f"\n--- {datetime.now(UTC).isoformat()} {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen([python, *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.running.append(proc)
        return proc

    def stop(self, procs: list[subprocess.Popen], *, timeout: float = 20) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.running = [p for p in self.running if p not in procs]

    def stop_all(self) -> None:
        self.stop(list(self.running), timeout=10)


class RssSampler(threading.Thread):
    """Samples RSS of the given processes every `every` s; keeps the peak and a series."""

    def __init__(
        self,
        pids: dict[str, int],
        *,
        every: float = 0.2,
        on_sample: Callable[[float, dict], None] | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.ps = {}
        for name, pid in pids.items():
            try:
                self.ps[name] = psutil.Process(pid)
            except psutil.Error:
                pass
        self.every = every
        self.peak = {name: 0 for name in self.ps}
        # user + system CPU seconds of each process, read when sampling finishes.
        self.cpu: dict[str, float] = {}
        self.series: list[tuple[float, dict]] = []
        self.on_sample = on_sample
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            sample = {}
            for name, p in self.ps.items():
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                sample[name] = rss
                self.peak[name] = max(self.peak[name], rss)
            self.series.append((time.time(), sample))
            if self.on_sample:
                self.on_sample(time.time(), sample)
            self.halt.wait(self.every)

    def cpu_seconds(self) -> dict[str, float]:
        """Each process's user + system CPU seconds so far (/proc/<pid>/stat utime + stime)."""
        out = {}
        for name, p in self.ps.items():
            try:
                t = p.cpu_times()
            except psutil.Error:
                continue
            out[name] = t.user + t.system
        return out

    def finish(self) -> dict:
        self.halt.set()
        self.join()
        self.cpu = self.cpu_seconds()
        return {k: v / 2**20 for k, v in self.peak.items()}


class LimitSampler(threading.Thread):
    """Reads each worker's birthday_worker_in_flight_limit for one endpoint from its metrics port every `every` s."""

    def __init__(self, ports: dict[str, int], *, url: str, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.pattern = re.compile(
            r'^birthday_worker_in_flight_limit\{endpoint="' + re.escape(url) + r'"\} (\S+)$', re.M
        )
        self.every = every
        self.series: list[tuple[float, dict[str, float]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            sample = {}
            for name, port in self.ports.items():
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1) as r:
                        m = self.pattern.search(r.read().decode())
                except OSError:
                    continue  # not serving yet (Django start-up), or gone
                if m:
                    sample[name] = float(m.group(1))
            if sample:
                self.series.append((time.time(), sample))
            self.halt.wait(self.every)

    def finish(self) -> dict:
        self.halt.set()
        self.join()
        names = sorted({n for _, s in self.series for n in s})
        return {
            "peak": {n: max((s.get(n, 0) for _, s in self.series), default=None) for n in names},
            "last": {n: next((s[n] for _, s in reversed(self.series) if n in s), None) for n in names},
            "peak_sum": max((sum(s.values()) for _, s in self.series), default=None),
            "samples": len(self.series),
        }
