"""A real local HTTP receiver and helpers to make events due, for the pipeline tests."""

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import date, timedelta
from pathlib import Path
from types import SimpleNamespace

import aiohappyeyeballs
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult
from django.db import connection, models
from django.utils import timezone

from delivery.credentials.receiver_urls import url_encrypt, url_key, url_normalise, url_redact
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import Delivery, DeliveryStatus
from delivery.selectors import delivery_attempts
from devtools.sink import Reply, WebhookSink
from devtools.suite_database import database_url
from scheduling.models import Event, EventStatus
from users.services import users_bulk_create_with_events

BASE_DIR = Path(__file__).resolve().parents[2]


class ScriptedSink(WebhookSink):
    """A sink whose answers can be scripted per idempotency key: [503, 503, 200], delays..."""

    def __init__(self):
        self.scripts: dict[str, list[Reply]] = defaultdict(list)
        self.default = Reply()
        super().__init__(respond=self._respond)

    def _respond(self, received):
        with self.lock:
            script = self.scripts.get(received.idempotency_key)
            if script:
                return script.pop(0)
        return self.default

    def script(self, key: str, *replies: Reply) -> None:
        self.scripts[key].extend(replies)

    def wait_for(self, count: int, timeout: float = 30.0, *, accepted: bool = False) -> bool:
        """Whether `count` keys arrived (with `accepted`, were answered 2xx) within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.accepted() if accepted else set(self.keys())) >= count:
                return True
            time.sleep(0.05)
        return False

    def accepted(self) -> Counter:
        """How many times each idempotency key was answered 2xx: what the receiver took."""
        with self.lock:
            return Counter(r.idempotency_key for r in self.received if 200 <= r.status < 300)


class RateLimiter:
    """A receiver's rate limit as nginx limit_req or an API gateway enforces it: a bucket of `burst` tokens
    refilled at `rate` a second; a request that finds it empty is refused at once, 429 without Retry-After.
    The others are answered after `latency` seconds. Set it as a sink's `respond`."""

    def __init__(self, *, rate: float, burst: int, latency: float) -> None:
        self.rate, self.burst, self.latency = rate, burst, latency
        self.tokens = float(burst)
        self.filled_mono = time.monotonic()
        self.lock = threading.Lock()

    def __call__(self, received) -> Reply:
        with self.lock:
            now_mono = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now_mono - self.filled_mono) * self.rate)
            self.filled_mono = now_mono
            if self.tokens < 1:
                return Reply(status=429)
            self.tokens -= 1
        return Reply(delay=self.latency)


@pytest.fixture
def sink():
    with ScriptedSink() as running:
        yield running


@pytest.fixture
def delivery_settings(settings, sink):
    """Point deliveries at the sink; retry fast so tests do not wait for backoff."""
    settings.WEBHOOK_URL = sink.url
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=2)
    settings.WEBHOOK_SECRET = ""
    settings.DELIVERY_RETRY_BASE = timedelta(milliseconds=10)
    settings.DELIVERY_RETRY_MAX = timedelta(seconds=5)
    settings.DELIVERY_MAX_ATTEMPTS = 8
    settings.DELIVERY_LEASE_MARGIN = timedelta(seconds=1)
    return settings


# The formats the fan-out tests' destinations take in turn: each receiver gets its own body.
FAN_OUT_FORMATS = ("standard", "slack", "teams")
# The max_rate of a chat destination at a local sink (which has no pace of its own to keep).
LOCAL_CHAT_RATE = 5000.0


def destinations_create_at(urls: Sequence[str]) -> None:
    """A destination subscribed to everything at each URL, the formats in turn.

    Also run by `manage.py shell -c` in a database of a test's own (test_outage.py).
    """
    for number, url in enumerate(urls):
        format_ = FAN_OUT_FORMATS[number % len(FAN_OUT_FORMATS)]
        destination_create(
            settings=DestinationSettings(
                name=f"receiver{number}",
                url=url,
                format=format_,
                # A chat kind keeps to its service's pace (1/s for Slack) unless its destination sets a
                # rate: these receivers are local sinks that take anything, as fast as the standard one.
                max_rate=None if format_ == "standard" else LOCAL_CHAT_RATE,
            ),
            operator="ops",
        )


@contextmanager
def receivers(
    settings,
    sink: ScriptedSink,
    count: int,
    *,
    create: Callable[[list[str]], object] = destinations_create_at,
) -> Iterator[list[ScriptedSink]]:
    """Where a fault test's deliveries go: with one, `sink` as the default destination (WEBHOOK_URL);
    with more, that many receivers of their own, no WEBHOOK_URL, and `create` makes their destinations."""
    if count == 1:
        settings.WEBHOOK_URL = sink.url
        yield [sink]
        return
    settings.WEBHOOK_URL = ""
    with ExitStack() as stack:
        sinks = [stack.enter_context(ScriptedSink()) for _ in range(count)]
        create([s.url for s in sinks])
        yield sinks


def assert_each_receiver_accepted_each_key_once(
    sinks: Sequence[ScriptedSink], keys: set[str], why: str = ""
) -> None:
    """Counted at each receiver, what it answered 2xx: every key (nothing lost), none twice (nothing sent twice)."""
    for number, sink in enumerate(sinks):
        accepted = sink.accepted()
        missing = keys - set(accepted)
        assert not missing, (
            f"receiver {number}: {len(missing)} of {len(keys)} never accepted: {sorted(missing)[:5]}"
        )
        assert set(accepted) == keys, (
            f"receiver {number}: keys of no event: {sorted(set(accepted) - keys)[:5]}"
        )
        twice = sorted(key for key, n in accepted.items() if n > 1)
        assert not twice, (
            f"receiver {number}: {len(twice)} of {len(keys)} accepted more than once{why}: {twice[:5]}"
        )


def assert_every_delivery_delivered_and_event_completed(*, events: int, destinations: int) -> None:
    """The database's end state: every delivery DELIVERED (none SENDING, QUEUED or DEAD), every due event COMPLETED."""
    deliveries = dict(Delivery.objects.values_list("status").annotate(n=models.Count("id")))
    assert deliveries == {DeliveryStatus.DELIVERED: events * destinations}, deliveries
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == events
    assert not Event.objects.filter(status=EventStatus.PROCESSING).exists()


def settled() -> bool:
    """Every delivery DELIVERED and no event still PROCESSING: every outcome recorded."""
    return (
        not Delivery.objects.exclude(status=DeliveryStatus.DELIVERED).exists()
        and not Event.objects.filter(status=EventStatus.PROCESSING).exists()
    )


def make_due(events=None, *, ago: timedelta = timedelta(seconds=1)) -> None:
    """Make PENDING events due: their target moves to `ago` before now."""
    qs = Event.objects.filter(status=Event.Status.PENDING)
    if events is not None:
        qs = qs.filter(pk__in=[e.pk for e in events])
    qs.update(target_timestamp_utc=timezone.now() - ago)


def create_due_users(count: int, *, ago: timedelta = timedelta(seconds=1)) -> None:
    rows = [
        {
            "first_name": f"User{i}",
            "last_name": "Load",
            "date_of_birth": date(1980 + i % 30, 1 + i % 12, 1 + i % 28),
            "timezone": ("America/New_York", "Europe/London", "Asia/Kathmandu", "Pacific/Chatham")[i % 4],
        }
        for i in range(count)
    ]
    users_bulk_create_with_events(rows=rows)
    make_due(ago=ago)


def process_env(settings, **extra) -> dict:
    """Environment for a product process that works on this test's database."""
    url = database_url(connection.settings_dict)
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "WEBHOOK_URL": settings.WEBHOOK_URL,
        # The test's own receiver policy (conftest.py's allowance of the local receivers, unless it set one).
        "WEBHOOK_ALLOW_HTTP": str(settings.WEBHOOK_ALLOW_HTTP).lower(),
        "WEBHOOK_ALLOWED_NETWORKS": ",".join(str(network) for network in settings.WEBHOOK_ALLOWED_NETWORKS),
        "WEBHOOK_TIMEOUT": str(settings.WEBHOOK_TIMEOUT.total_seconds()),
        "DELIVERY_RETRY_BASE": str(settings.DELIVERY_RETRY_BASE.total_seconds()),
        "DELIVERY_RETRY_MAX": str(settings.DELIVERY_RETRY_MAX.total_seconds()),
        "DELIVERY_LEASE_MARGIN": str(settings.DELIVERY_LEASE_MARGIN.total_seconds()),
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def start_process(command: list[str], env: dict, log_path: Path) -> subprocess.Popen:
    log = open(log_path, "w")
    return subprocess.Popen(
        [sys.executable, str(BASE_DIR / "manage.py"), *command],
        cwd=BASE_DIR,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def wait_until(condition, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def eventually(condition, timeout: float, interval: float = 0.25) -> bool:
    """Like wait_until, but says whether it happened: the assertions that follow explain what did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


def stop_all(processes, timeout: float = 30) -> list[int]:
    """SIGTERM every process and return the exit codes; one that hangs is killed (-9)."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    codes = []
    for process in processes:
        try:
            codes.append(process.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append(process.wait())
    return codes


class ScriptedDns(AbstractResolver):
    """DNS as a test scripts it: each name's answers in turn, the last one for ever after.

    Serves the worker's resolver (async, as aiohttp asks) and the check at creation
    (called as `resolve(host, port)`); `asked` lists the names asked, in order.
    """

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = {name: list(turns) for name, turns in answers.items()}
        self.asked: list[str] = []

    def addresses(self, host: str) -> list[str]:
        self.asked.append(host)
        turns = self.answers.get(host)
        if not turns:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return turns.pop(0) if len(turns) > 1 else turns[0]

    def __call__(self, host: str, port: int) -> list[str]:
        return self.addresses(host)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                proto=0,
                flags=socket.AI_NUMERICHOST,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
            )
            for address in self.addresses(host)
        ]

    async def close(self) -> None:
        pass


class Network:
    """Where a connection to an address ends up: `route` makes an address another listener on this machine."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[str, int]] = {}

    def route(self, address: str, *, to: str) -> None:
        """Connections to `address` (any port) reach the listener at URL `to`."""
        host, port = to.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        self.routes[address] = (host, int(port))


@pytest.fixture
def network(monkeypatch) -> Network:
    """Addresses a test cannot listen on (10.0.0.5, 169.254.169.254) made to reach local receivers.

    So a refusal test can fail: were the address let through, the request would
    arrive at the receiver the test watches. Rewrites what aiohttp hands its
    connection racer (aiohappyeyeballs), after every check.
    """
    routed = Network()
    start_connection = aiohappyeyeballs.start_connection

    async def start_routed_connection(addr_infos, *args, **kwargs):
        addr_infos = [
            (socket.AF_INET, kind, proto, name, routed.routes[address[0]])
            if address[0] in routed.routes
            else (family, kind, proto, name, address)
            for family, kind, proto, name, address in addr_infos
        ]
        return await start_connection(addr_infos, *args, **kwargs)

    monkeypatch.setattr(aiohappyeyeballs, "start_connection", start_routed_connection)
    return routed


@pytest.fixture
def history(delivery_settings):
    """A destination's history to recover (delivery.actions.tests.recovery_data.history_build): crm, chat, crm's deliveries."""
    from delivery.actions.tests.recovery_data import history_build

    delivery_settings.WEBHOOK_URL = ""
    return history_build()


def busiest_second(received) -> int:
    """Most requests that arrived within one calendar second of the receiver's clock."""
    return max(Counter(math.floor(r.received_at) for r in received).values(), default=0)


# What a second may hold beyond the cap at most (docs/design.md, "The fleet's caps").
RATE_SLACK = 1.05


def assert_rate_held(received, *, rate: float, used: float | None = None) -> None:
    """No calendar second at the receiver held more than `rate` requests (plus RATE_SLACK); with `used`, the busiest
    held at least that many (the cap was reached, so the test said something)."""
    busiest = busiest_second(received)
    seconds = sorted(Counter(math.floor(r.received_at) for r in received).items())
    counts = [count for _, count in seconds]
    assert busiest <= rate * RATE_SLACK, (
        f"{busiest} requests in one calendar second against {rate}/s: {counts}"
    )
    if used is not None:
        assert busiest >= used, (
            f"only {busiest} requests in the busiest second: the cap was not used: {counts}"
        )


def key_of(url: str) -> str:
    """The endpoint key (Endpoint.key, Delivery.endpoint_key) of the receiver at `url`."""
    return url_key(url_normalise(url))


def endpoint_columns(url: str) -> dict:
    """An Endpoint's columns for the receiver at `url`: Endpoint.objects.create(**endpoint_columns(url))."""
    url = url_normalise(url)
    return {"key": url_key(url), "url_ciphertext": url_encrypt(url), "url_display": url_redact(url)}


def peak_open(received, hold: float) -> int:
    """Most requests open at the receiver at once, each held `hold` seconds after it arrived."""
    edges = sorted([(r.received_at, 1) for r in received] + [(r.received_at + hold, -1) for r in received])
    peak = current = 0
    for _, step in edges:
        current += step
        peak = max(peak, current)
    return peak


@contextmanager
def cpu_load(processes: int | None = None) -> Iterator[None]:
    """Busy-loop processes, one per core unless told: the machine is loaded while the block runs."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(processes or os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def shown_attempts(delivery: Delivery, *fields: str) -> list:
    """The delivery's attempts as every reader shows them (delivery.selectors.delivery_attempts), first to last.

    A success writes no attempt row (its delivery holds it), so `delivery.attempt_log` holds the failures
    only. With `fields`, each attempt as a tuple of those; without, as an object with an attribute per column.
    """
    attempts = delivery_attempts(delivery_ids=[delivery.pk]).get(delivery.pk, [])
    if fields:
        return [tuple(a[f] for f in fields) for a in attempts]
    return [SimpleNamespace(**a) for a in attempts]
