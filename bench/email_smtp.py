"""Email throughput: personal greetings through the product's worker to a local aiosmtpd, against a bare loop.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench_email .venv/bin/python -m bench.email_smtp \\
        --count 10000 --workers 1,2

Run with the product's venv (it needs the product, aiosmtplib and aiosmtpd). In one run:

1. an aiosmtpd server in a process of its own (`--serve`, on a free port), which counts
   the messages it took and by Message-ID;
2. the baseline: one aiosmtplib connection, reused, sending the same messages (built by
   the product's own `message_build`, from the bodies the claim stored, in the loop) one
   after the other, as fast as the server answers: messages a second; and the same with
   the messages built before the clock starts (the transport alone);
3. the product, for each worker count: the database made afresh (`manage.py migrate`
   into the database DATABASE_URL names, which it drops and creates), one personal email
   destination to the server, `count` recipients with addresses all due now, queued by
   the scheduler's claim in-process; then `run_worker --once` that many times at once,
   timed from their start until every delivery is DELIVERED.

It prints one JSON object per measurement and the ratios; bench/results/REPORT-email.md
holds a run's figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent


def serve(port: int, report: Path) -> None:
    """The SMTP server: takes everything; on SIGTERM writes how many it took, by Message-ID, to `report`."""
    import email
    import email.policy
    import signal

    from aiosmtpd.controller import Controller

    by_id: Counter[str] = Counter()

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook
            # The Message-ID's line only: parsing every message whole would make the server the bench.
            head = envelope.original_content.split(b"\r\n\r\n", 1)[0]
            mid = next(
                (
                    line.split(b":", 1)[1].strip()
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"message-id:")
                ),
                b"",
            )
            by_id[mid.decode()] += 1
            return "250 OK"

    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    stopped = False

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    while not stopped:
        time.sleep(0.2)
    controller.stop()
    report.write_text(
        json.dumps(
            {
                "messages": sum(by_id.values()),
                "ids": len(by_id),
                "twice": sum(1 for n in by_id.values() if n > 1),
            }
        )
    )
    _ = email, email.policy


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(BASE_DIR))
    import django

    django.setup()


def _fresh_database(env: dict) -> None:
    """Drop and create DATABASE_URL's database, and migrate it."""
    import psycopg

    url = env["DATABASE_URL"]
    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [name],
        )
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=BASE_DIR, env=env, check=True)


def _queue(count: int, relay: str) -> list[tuple[str, str]]:
    """`count` personal greetings queued to `relay`: what the claim stored, (key, body) each."""
    from datetime import date

    from django.utils import timezone

    from delivery.destinations.fields import DestinationSettings
    from delivery.destinations.services import destination_create
    from delivery.dispatch.claim import deliveries_enqueue_due
    from delivery.models import Delivery
    from scheduling.models import Event, EventStatus
    from users.services import users_bulk_create_with_events

    destination_create(
        settings=DestinationSettings(
            name="bench mail",
            url=relay,
            format="email",
            personal=True,
            email_from="greetings@example.com",
            email_from_name="People Team",
        ),
        operator="bench",
    )
    today = timezone.now().date()
    users_bulk_create_with_events(
        rows=(
            {
                "first_name": f"Person{n}",
                "last_name": "Mailed",
                "date_of_birth": date(1980 + n % 30, today.month, min(today.day, 28)),
                "timezone": "UTC",
                "email": f"p{n}@example.org",
            }
            for n in range(count)
        )
    )
    Event.objects.filter(status=EventStatus.PENDING).update(target_timestamp_utc=timezone.now())
    while deliveries_enqueue_due(batch_size=1000).claimed:
        pass
    return list(Delivery.objects.values_list("idempotency_key", "payload"))


def _bare(port: int, bodies: list[tuple[str, str]]) -> tuple[float, float]:
    """Messages a second over one reused aiosmtplib connection, the product's messages: each built in the loop
    by the product's own message_build (what any sender of these messages does), and, second, built before the
    clock starts (the transport alone)."""
    import aiosmtplib

    from delivery.receivers.lane_settings import Relay
    from delivery.receivers.protocol import ClaimedDelivery
    from delivery.receivers.smtp import message_build

    relay = Relay(destination_id=1, destination_name="bench mail", from_address="greetings@example.com")
    prepared = []
    for key, payload in bodies:
        body = payload if isinstance(payload, dict) else json.loads(payload)
        delivery = ClaimedDelivery(
            id=None, event_id=None, idempotency_key=key, endpoint_key="", body="", attempt=1, max_attempts=1
        )  # type: ignore[arg-type]
        prepared.append((delivery, body))

    def built(delivery, body) -> bytes:
        return message_build(delivery=delivery, body=body, relay=relay, to=body["to"], utf8=False).as_bytes()

    async def run(prebuilt: bool) -> float:
        messages = [(body["to"], built(d, body)) for d, body in prepared] if prebuilt else None
        client = aiosmtplib.SMTP(hostname="127.0.0.1", port=port, start_tls=False)
        await client.connect()
        started = time.perf_counter()
        if messages is not None:
            for to, raw in messages:
                await client.sendmail("greetings@example.com", [to], raw)
        else:
            for delivery, body in prepared:
                await client.sendmail("greetings@example.com", [body["to"]], built(delivery, body))
        elapsed = time.perf_counter() - started
        await client.quit()
        return elapsed

    return len(prepared) / asyncio.run(run(False)), len(prepared) / asyncio.run(run(True))


def _product(env: dict, workers: int, count: int) -> tuple[float, float]:
    """Messages a second: `workers` run_worker --once started together, until all `count` are DELIVERED; timed
    from their start (their Django start-up included), and from the first delivery recorded."""
    from delivery.models import Delivery, DeliveryStatus

    started = time.perf_counter()
    first: float | None = None
    processes = [
        subprocess.Popen(
            [sys.executable, "manage.py", "run_worker", "--once"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(workers)
    ]
    delivered = Delivery.objects.filter(status=DeliveryStatus.DELIVERED)
    while (done := delivered.count()) < count:
        if first is None and done:
            first = time.perf_counter()
        if all(p.poll() is not None for p in processes):
            raise SystemExit(f"the workers exited with {delivered.count()} of {count} delivered")
        time.sleep(0.05)
    ended = time.perf_counter()
    for process in processes:
        process.wait(timeout=60)
    return count / (ended - started), (count - 1) / (ended - (first or started))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.report)
        return 0
    from devtools.ports import free_port

    env = {
        **os.environ,
        "WEBHOOK_URL": "",
        "WEBHOOK_ALLOW_HTTP": "true",
        "WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update({k: env[k] for k in ("WEBHOOK_URL", "WEBHOOK_ALLOW_HTTP", "WEBHOOK_ALLOWED_NETWORKS")})
    results = {}
    for workers in [int(w) for w in args.workers.split(",")]:
        _fresh_database(env)
        _setup_django()
        from django.db import connections

        port = free_port()
        report = Path(f"/tmp/bench-email-{port}.json")
        server = subprocess.Popen(
            [sys.executable, "-m", "bench.email_smtp", "--serve", str(port), "--report", str(report)],
            cwd=BASE_DIR,
        )
        time.sleep(1.5)
        try:
            bodies = _queue(args.count, f"smtp+plain://127.0.0.1:{port}/")
            bare, bare_bytes = _bare(port, bodies)
            product, product_running = _product(env, workers, args.count)
        finally:
            server.terminate()
            server.wait(timeout=30)
        counted = json.loads(report.read_text())
        results[workers] = {
            "bare_per_s": round(bare, 1),
            "bare_prebuilt_per_s": round(bare_bytes, 1),
            "product_per_s": round(product, 1),
            "product_running_per_s": round(product_running, 1),
            "ratio": round(product / bare, 3),
            "ratio_running": round(product_running / bare, 3),
            "ratio_to_prebuilt": round(product / bare_bytes, 3),
            "server": counted,
        }
        print(json.dumps({"workers": workers, **results[workers]}), flush=True)
        connections.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
