"""What the report says about the machine a run measured: CPU, memory, versions, load, commit."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import psutil

from bench.locations import POSTGRES, PRODUCT_PY, ROOT


def machine_info() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    pg = subprocess.run(
        ["psql", f"{POSTGRES}/postgres", "-Atc", "SHOW server_version"], capture_output=True, text=True
    )
    product_py = subprocess.run([PRODUCT_PY, "-V"], capture_output=True, text=True).stdout.strip()
    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True).stdout.splitlines()[:1]
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "postgresql": pg.stdout.strip() or pg.stderr.strip(),
        "python_product": product_py,
        "python_bench": platform.python_version(),
        "kernel": platform.release(),
        "nginx": nginx,
        "wrk": wrk[0] if wrk else "",
        "load_at_start": os.getloadavg(),
        "git_head": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "git_dirty": subprocess.run(
            ["git", "status", "--short", "--", "config", "delivery", "scheduling", "users"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines(),
    }
