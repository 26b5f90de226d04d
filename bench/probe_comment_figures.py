"""Run with the PRODUCT's venv: the figures behind three of the code's comments (FINDINGS.md).

    .venv/bin/python -m bench.probe_comment_figures proxies REQUESTS ROUNDS
    DATABASE_URL=<a scratch database> .venv/bin/python -m bench.probe_comment_figures zone_batch EVENTS ROUNDS
    .venv/bin/python -m bench.probe_comment_figures hasher ROUNDS

proxies (delivery/receivers/transport.py, WebhookTransport): REQUESTS product-shaped POSTs, 64
open at a time, from one aiohttp session to a local aiohttp receiver in a process of
its own, with aiohttp's trust_env (proxies and ~/.netrc looked up again for every
request, in threads) and as the transport sends (trust_env off, the proxy decided
once), taken in turn ROUNDS times. Prints one JSON line per run: the rate and the
client's CPU (user + system, every thread) per request.

zone_batch (scheduling/services/zone_rules.py, `_batch`): imports EVENTS recipients
over 20 zones into the database if it holds fewer PENDING events (migrate it first),
then times, ROUNDS times in turn, the pass's read of its first batch (5,000 events)
as binary rows, as the pass reads it, and as text, and the pass's own Python work on
that batch (`_CurrentRules.moves`, its cache warm as in a running pass). Prints the
medians and ranges.

hasher (conftest.py, fast_password_hashing): the time Django's default password
hasher takes to hash one password, as creating an operator does, ROUNDS times.
"""

import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import sys
import time
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

IN_FLIGHT = 64


def _serve(port: int) -> None:
    from aiohttp import web

    async def answer(request):
        await request.read()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/", answer)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _post_all(url: str, requests: int, *, trust_env: bool) -> tuple[float, float]:
    import aiohttp

    body = json.dumps({"message": "Hey, Ada Lovelace it's your birthday", "event_id": "0" * 36}).encode()
    # As delivery/receivers/transport.py opens its session; without trust_env it passes the proxy it decided.
    options = {} if trust_env else {"proxy": None}
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        trust_env=trust_env,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
    ) as session:
        numbers = iter(range(requests))

        async def sender() -> None:
            for number in numbers:
                headers = {"Content-Type": "application/json", "X-Idempotency-Key": f"probe-{number}"}
                async with session.post(
                    url, data=body, headers=headers, allow_redirects=False, **options
                ) as answer:
                    await answer.read()

        cpu, started = _cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(IN_FLIGHT)))
        return time.perf_counter() - started, _cpu_seconds() - cpu


def proxies(requests: int, rounds: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    receiver = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    receiver.start()
    try:
        time.sleep(1.5)
        url = f"http://127.0.0.1:{port}/"
        asyncio.run(_post_all(url, 500, trust_env=False))  # connections and imports warm
        for number in range(rounds):
            for trust_env in (True, False):
                seconds, cpu = asyncio.run(_post_all(url, requests, trust_env=trust_env))
                line = {"round": number, "trust_env": trust_env, "rate": round(requests / seconds)}
                print(
                    json.dumps({**line, "client_cpu_us_per_request": round(cpu / requests * 1e6)}), flush=True
                )
    finally:
        receiver.terminate()


def _summary(seconds: list[float]) -> str:
    return f"median {statistics.median(seconds) * 1e3:.1f} ms ({min(seconds) * 1e3:.1f}-{max(seconds) * 1e3:.1f})"


def zone_batch(events: int, rounds: int) -> None:
    import django

    django.setup()
    from datetime import date, timedelta

    from django.db import connection, transaction
    from django.utils import timezone

    from scheduling.models import Event, EventStatus
    from scheduling.services import zone_rules
    from scheduling.zonedata import zone_data
    from users.services import users_bulk_create_with_events

    zones = (
        "Asia/Almaty",
        "America/New_York",
        "Europe/London",
        "Asia/Tokyo",
        "America/Mexico_City",
        "Europe/Berlin",
        "Australia/Sydney",
        "America/Sao_Paulo",
        "Africa/Cairo",
        "Asia/Kolkata",
        "Asia/Kathmandu",
        "Pacific/Auckland",
        "America/Los_Angeles",
        "Europe/Moscow",
        "Asia/Shanghai",
        "America/Chicago",
        "Asia/Tehran",
        "Atlantic/Azores",
        "America/St_Johns",
        "Pacific/Chatham",
    )
    if Event.objects.filter(status=EventStatus.PENDING).count() < events:
        users_bulk_create_with_events(
            rows=(
                {
                    "first_name": f"First{n}",
                    "last_name": f"Last{n}",
                    "date_of_birth": date(1960 + n % 40, 1 + n % 12, 1 + n % 28),
                    "timezone": zones[n % len(zones)],
                }
                for n in range(events)
            )
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_event")

    product_execute = zone_rules.execute

    def as_text(sql, params, *, binary=False):
        return product_execute(sql, params, binary=False)

    def first_batch() -> list:
        with transaction.atomic():
            return zone_rules._batch(
                after_target=timezone.now() - timedelta(days=1), after_id=uuid.UUID(int=0), batch_size=5000
            )

    times: dict[str, list[float]] = {"binary": [], "text": [], "moves": []}
    current_rules = zone_rules._CurrentRules(version=zone_data().version)
    for _ in range(rounds):
        for mode in ("binary", "text"):
            zone_rules.execute = product_execute if mode == "binary" else as_text
            try:
                started = time.perf_counter()
                batch = first_batch()
                times[mode].append(time.perf_counter() - started)
            finally:
                zone_rules.execute = product_execute
        started = time.perf_counter()
        current_rules.moves(events=batch)
        times["moves"].append(time.perf_counter() - started)
    print(
        json.dumps(
            {"events_read": len(batch), **{name: _summary(seconds) for name, seconds in times.items()}}
        )
    )


def hasher(rounds: int) -> None:
    import django

    django.setup()
    from django.contrib.auth.hashers import get_hasher, make_password

    seconds = []
    for _ in range(rounds):
        started = time.perf_counter()
        make_password("probe-Pass-1!")
        seconds.append(time.perf_counter() - started)
    default = get_hasher()
    print(
        json.dumps(
            {
                "hasher": default.algorithm,
                "iterations": getattr(default, "iterations", None),
                "seconds": _summary(seconds),
            }
        )
    )


if __name__ == "__main__":
    probe, *arguments = sys.argv[1:]
    {"proxies": proxies, "zone_batch": zone_batch, "hasher": hasher}[probe](*map(int, arguments))
