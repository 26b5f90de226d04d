"""py-spy on a running process, and the functions its samples point at."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bench.locations import BENCH_PY


def py_spy_record(pid: int, *, seconds: float, out: Path) -> subprocess.Popen:
    """py-spy sampling `pid` at 100 Hz into `out` (collapsed stacks) for `seconds`, or until it exits (0)."""
    args = [
        str(Path(BENCH_PY).parent / "py-spy"),
        "record",
        "--pid",
        str(pid),
        "--rate",
        "100",
        "--nonblocking",
        "--format",
        "raw",
        "-o",
        str(out),
    ]
    if seconds:
        args += ["--duration", str(int(seconds))]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(str(out) + ".log", "w"))


def top_functions(path: Path, *, top: int = 12) -> dict:
    """From py-spy's collapsed stacks: the functions with the most samples (self and inclusive)."""
    self_counts: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        frames = [re.sub(r"\(.*/(site-packages|lib/python3\.\d+|main)/", "(", f) for f in frames]
        leaf = frames[-1]
        self_counts[leaf] = self_counts.get(leaf, 0) + n
        for f in set(frames):
            incl[f] = incl.get(f, 0) + n

    def rows(d):
        return [(f, round(100 * c / total, 1)) for f, c in sorted(d.items(), key=lambda kv: -kv[1])[:top]]

    # Inclusive: only the product's own functions and its direct libraries are informative.
    own = {
        f: c
        for f, c in incl.items()
        if (
            re.search(r"\((delivery|scheduling|users|config)/", f)
            and "management/commands" not in f
            and not re.match(r"(Worker|Scheduler)\.run ", f)
        )
        or re.match(
            r"(QuerySet\.(bulk_update|bulk_create|update|__iter__|delete)|Session\.request|Cursor\.execute|"
            r"SQLCompiler\.as_sql|SQLUpdateCompiler\.as_sql|Q\.__or__|Case\.as_sql) ",
            f,
        )
    }
    return {"samples": total, "self": rows(self_counts), "inclusive": rows(own)}
