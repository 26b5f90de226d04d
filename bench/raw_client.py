"""Baseline (a): one Python process POSTing webhook bodies and nothing else.

    python -m bench.raw_client MODE URL N PREFIX [IN_FLIGHT]     MODE: requests | urllib3 | aiohttp

IN_FLIGHT: requests the aiohttp client keeps open (default 32).
Prints one JSON line: {"mode", "n", "seconds", "rate", "in_flight", "cpu_s"} (cpu_s: the
process's user + system CPU seconds, start-up included). The bodies and headers
are shaped like the product's (JSON payload, Content-Type, X-Idempotency-Key).
The requests client is tuned as the product's transport is (delivery/receivers/transport.py:
trust_env off with proxies read once, stream=True, the body read from the raw stream).
"""

import asyncio
import json
import resource
import sys
import time


def bodies(n: int, prefix: str):
    for i in range(n):
        body = json.dumps(
            {
                "message": f"Hey, First{i} Last{i} it's your birthday",
                "event_id": f"00000000-0000-0000-0000-{i:012d}",
                "event_type": "BIRTHDAY",
                "user_id": f"00000000-0000-0000-0001-{i:012d}",
                "occurrence_date": "2026-11-22",
                "target_timestamp_utc": "2026-11-22T09:00:00+00:00",
            },
            separators=(",", ":"),
        ).encode()
        yield f"{prefix}-{i}", body


# As delivery/receivers/transport.py: bodies up to this size are read whole, straight from the stream.
READ_WHOLE_BODY_UP_TO = 64 * 1024
EXCERPT_BYTES = 2048  # DeliveryAttempt.RESPONSE_EXCERPT_BYTES


def tuned_session():
    """A requests.Session set up as the product's transport sets up its own (delivery/receivers/transport.py).

    requests re-reads proxy variables and .netrc on every call unless trust_env is
    off; the product reads the proxies once, so the baseline does the same.
    """
    import urllib.request

    import requests

    session = requests.Session()
    session.trust_env = False
    session.proxies.update({scheme: u for scheme, u in urllib.request.getproxies().items() if scheme != "no"})
    return session


def post_tuned(session, url, body: bytes, key: str) -> bytes:
    """One POST the way the product's transport sends it: stream=True, no redirects, raw body read."""
    r = session.post(
        url,
        data=body,
        headers={"Content-Type": "application/json", "X-Idempotency-Key": key},
        timeout=10,
        allow_redirects=False,
        stream=True,
    )
    try:
        length = int(r.headers.get("Content-Length", ""))
    except ValueError:
        length = None
    if length is not None and length <= READ_WHOLE_BODY_UP_TO:
        return r.raw.read(decode_content=True) or b""
    raw = r.raw.read(EXCERPT_BYTES, decode_content=True) or b""
    r.close()
    return raw


def run_requests(url, n, prefix):
    session = tuned_session()
    for key, body in bodies(n, prefix):
        post_tuned(session, url, body, key)


def tuned_pool(url):
    """A urllib3 connection pool and request target, as the product's transport uses them."""
    import urllib3

    return urllib3.connection_from_url(url, maxsize=1, block=False), urllib3.util.parse_url(url).request_uri


def post_pool(pool, target, body: bytes, key: str) -> bytes:
    """One POST the way the product's transport sends it (delivery/receivers/transport.py)."""
    import urllib3

    r = pool.urlopen(
        "POST",
        target,
        body=body,
        headers={"Content-Type": "application/json", "X-Idempotency-Key": key},
        timeout=urllib3.Timeout(connect=10, read=10),
        retries=False,
        redirect=False,
        preload_content=False,
    )
    try:
        length = int(r.headers.get("Content-Length", ""))
    except ValueError:
        length = None
    if length is not None and length <= READ_WHOLE_BODY_UP_TO:
        data = r.read()
        r.release_conn()
        return data
    data = r.read(EXCERPT_BYTES)
    r.close()
    r.release_conn()
    return data


def run_urllib3(url, n, prefix):
    pool, target = tuned_pool(url)
    for key, body in bodies(n, prefix):
        post_pool(pool, target, body, key)


def run_aiohttp(url, n, prefix, in_flight=32):
    import aiohttp

    async def main():
        queue = list(bodies(n, prefix))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=in_flight)) as s:

            async def one(worker):
                while queue:
                    key, body = queue.pop()
                    async with s.post(
                        url, data=body, headers={"Content-Type": "application/json", "X-Idempotency-Key": key}
                    ) as r:
                        await r.read()

            await asyncio.gather(*(one(w) for w in range(in_flight)))

    asyncio.run(main())


if __name__ == "__main__":
    mode, url, n, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    in_flight = int(sys.argv[5]) if len(sys.argv) > 5 else 32
    # One fd per open connection: thousands of them need more than a default soft limit of 1,024.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < in_flight + 256:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (65536 if hard == resource.RLIM_INFINITY else min(hard, 65536), hard)
        )
    started = time.perf_counter()
    if mode == "aiohttp":
        run_aiohttp(url, n, prefix, in_flight)
    else:
        {"requests": run_requests, "urllib3": run_urllib3}[mode](url, n, prefix)
    seconds = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "mode": mode,
                "n": n,
                "seconds": seconds,
                "rate": n / seconds,
                "in_flight": in_flight if mode == "aiohttp" else 1,
                "cpu_s": usage.ru_utime + usage.ru_stime,
            }
        )
    )
