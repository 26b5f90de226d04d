"""wrk, one thread, against a URL for a few seconds: requests/s, the 99th percentile, non-2xx answers."""

from __future__ import annotations

import os
import re
import subprocess


def wrk_run(url: str, *, script: str, connections: int, seconds: int, env: dict | None = None) -> dict:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", script, url],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    unit = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return {
        "rps": rps,
        "p99_ms": float(p99.group(1)) * unit[p99.group(2)] if p99 else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
        "raw": out,
    }
