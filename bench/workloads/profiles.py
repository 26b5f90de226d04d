"""Where the time goes, by py-spy: a burst's scheduler and worker, `import_users`, one gunicorn worker."""

from __future__ import annotations

from dataclasses import dataclass

import psutil

from bench.api_server import api_token, gunicorn_start
from bench.harness import Harness, log
from bench.locations import RAW
from bench.profiling import py_spy_record, top_functions
from bench.workload import Workload
from bench.workloads import burst, import_users
from bench.wrk import wrk_run


@dataclass(frozen=True)
class ProfilesSize:
    profile_seconds: int  # seconds each profiler samples a burst's processes and the API
    burst_n: int  # events of the profiled burst: the burst workload's
    import_rows: (
        int  # the import workload's CSV, whose first rows (200,000 at most) are imported under py-spy
    )


SIZES = {
    size: ProfilesSize(
        profile_seconds=seconds,
        burst_n=burst.SIZES[size].burst_n,
        import_rows=import_users.SIZES[size].import_rows,
    )
    for size, seconds in (("small", 5), ("full", 10))
}


def measure(harness: Harness, *, size: ProfilesSize) -> dict:
    out = {}
    secs = size.profile_seconds
    log("profiles: burst, 1 worker x concurrency 8, py-spy on scheduler and worker")
    run = harness.attempt(
        burst.burst_once, harness, n=size.burst_n, workers=1, concurrency=8, slow=False, profile=secs
    )
    out["burst_run"] = {k: v for k, v in run.items()}
    for name in ("scheduler", "worker1"):
        path = RAW / f"profile-burst-{name}.txt"
        if path.exists():
            out[f"burst-{name}"] = top_functions(path)
    log("profiles: import_users under py-spy")
    n = min(200_000, size.import_rows)
    path = import_users.import_csv_path(rows=size.import_rows)
    if path.exists():
        part = RAW / f"import-part-{n}.csv"
        with open(path) as src, open(part, "w") as dst:
            for i, line in enumerate(src):
                if i > n:
                    break
                dst.write(line)
        harness.truncate()
        p = harness.processes.spawn("import", ["manage.py", "import_users", str(part)], env=harness.env())
        prof = py_spy_record(p.pid, seconds=0, out=RAW / "profile-import.txt")
        p.wait()
        prof.wait()
        out["import"] = top_functions(RAW / "profile-import.txt")
        out["import_rows"] = n
    log("profiles: API under wrk, py-spy on one gunicorn worker")
    harness.truncate()
    token = api_token(harness)
    server = gunicorn_start(harness, settings_module="config.settings")
    kids = psutil.Process(server.process.pid).children()
    if kids:
        prof = py_spy_record(kids[0].pid, seconds=secs, out=RAW / "profile-api.txt")
        wrk_run(
            f"http://127.0.0.1:{server.port}/api/v1/users/",
            script="bench/api_post.lua",
            connections=8,
            seconds=secs + 1,
            env={"BENCH_TOKEN": token},
        )
        prof.wait()
        out["api"] = top_functions(RAW / "profile-api.txt")
    harness.processes.stop([server.process])
    return out


WORKLOAD = Workload(name="profiles", measure=measure, sizes=SIZES)
