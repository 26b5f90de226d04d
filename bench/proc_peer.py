"""Baseline (b): procrastinate (bench venv only), one job per webhook doing the same POST.

    python -m bench.proc_peer schema
    python -m bench.proc_peer defer sync|async N PREFIX
    python -m bench.proc_peer work CONCURRENCY     (exits once the queue is empty)

Env: BENCH_PROC_DSN (its own database), BENCH_URL (the receiver). The sync task posts
through a urllib3 pool exactly as bench/raw_client.py and the product's transport do; the harness may start several `work` processes on one queue.
"""

import logging
import os
import sys
import threading

import procrastinate

from bench.raw_client import bodies, post_pool, tuned_pool

URL = os.environ.get("BENCH_URL", "")
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_PROC_DSN"], min_size=1, max_size=40)
)
_local = threading.local()
_aio = {}


def _pool():
    # One urllib3 connection pool per thread, used as the product's transport
    # uses its own: the same HTTP client and per-call costs on both sides.
    if not hasattr(_local, "pool"):
        _local.pool = tuned_pool(URL)
    return _local.pool


@app.task(name="post_sync")
def post_sync(key: str, body: str) -> None:
    pool, target = _pool()
    post_pool(pool, target, body.encode(), key)


@app.task(name="post_async")
async def post_async(key: str, body: str) -> None:
    import aiohttp

    s = _aio.get("s")
    if s is None:
        s = _aio["s"] = aiohttp.ClientSession()
    async with s.post(
        URL, data=body.encode(), headers={"Content-Type": "application/json", "X-Idempotency-Key": key}
    ) as r:
        await r.read()


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    cmd = sys.argv[1]
    if cmd == "schema":
        with app.open():
            app.schema_manager.apply_schema()
    elif cmd == "defer":
        task = {"sync": post_sync, "async": post_async}[sys.argv[2]]
        n, prefix = int(sys.argv[3]), sys.argv[4]
        jobs = [{"key": k, "body": b.decode()} for k, b in bodies(n, prefix)]
        with app.open():
            for i in range(0, n, 1000):
                task.batch_defer(*jobs[i : i + 1000])
    elif cmd == "work":
        app.run_worker(concurrency=int(sys.argv[2]), wait=False, install_signal_handlers=False)
    else:
        raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
