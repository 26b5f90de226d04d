"""Receivers as they are, for real: slow, throttling, down for longer than the retry window, capped, paused.

Real run_scheduler and run_worker processes with the shipped settings unless a
test names one, a real local receiver, and at the end a count of what arrived:
nothing lost, nothing twice, nothing DEAD because the receiver was unwell.
"""

import re
import time
import urllib.request
from collections import Counter
from datetime import timedelta

import pytest

from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus, Endpoint, EndpointState
from delivery.states.endpoints import endpoint_pause, endpoint_resume
from delivery.tests.pipeline import (
    RateLimiter,
    assert_each_receiver_accepted_each_key_once,
    assert_every_delivery_delivered_and_event_completed,
    assert_rate_held,
    create_due_users,
    eventually,
    key_of,
    peak_open,
    process_env,
    receivers,
    settled,
    start_process,
    stop_all,
    wait_until,
)
from devtools.ports import free_port
from devtools.sink import Reply
from scheduling.models import Event, EventStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def assert_all_delivered_once(sink, expected: int) -> None:
    counts = Counter(r.idempotency_key for r in sink.received if r.status == 200)
    assert len(counts) == expected, f"{expected - len(counts)} never delivered"
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1][:5]
    assert Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == expected
    assert not Delivery.objects.exclude(status=DeliveryStatus.DELIVERED).exists()
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == expected


def start_fleet(settings, tmp_path, *, workers: int = 2, worker_args: tuple = (), **env_extra):
    env = process_env(settings, **env_extra)
    processes = [start_process(["run_scheduler"], env, tmp_path / "scheduler.log")]
    processes += [
        start_process(["run_worker", *worker_args], env, tmp_path / f"worker{i}.log") for i in range(workers)
    ]
    return processes


def started(log) -> bool:
    text = log.read_text() if log.exists() else ""
    return "Scheduler started" in text or "Worker started" in text


def test_a_slow_receiver_gets_hundreds_of_requests_open_with_the_shipped_settings(
    delivery_settings, sink, tmp_path
):
    # Given a receiver that takes 200 ms to answer and 1,500 greetings due
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=5)
    sink.default = Reply(delay=0.2)
    create_due_users(1500)

    # When one scheduler and two workers run with no --concurrency
    processes = start_fleet(delivery_settings, tmp_path)
    try:
        assert sink.wait_for(1500, timeout=120), f"only {len(set(sink.keys()))} of 1500 arrived"
        wait_until(settled, 30, "every outcome recorded")
    finally:
        codes = stop_all(processes)

    # Then each worker's limit grew far past the old fixed 8 threads, and nothing was sent twice
    assert codes == [0, 0, 0]
    assert_all_delivered_once(sink, 1500)
    assert peak_open(sink.received, hold=0.2) >= 100


@pytest.mark.parametrize("destinations", [1, 3], ids=["one-destination", "three-destinations"])
def test_a_receiver_down_longer_than_the_retry_window_loses_nothing_and_kills_nothing(
    delivery_settings, sink, tmp_path, destinations
):
    # Given a retry policy whose 3 attempts span about a second, and a receiver that answers
    # 503 to everything for 8 s (far longer) before it comes back; with three destinations, the
    # other two answer at once
    delivery_settings.DELIVERY_RETRY_BASE = timedelta(milliseconds=100)
    delivery_settings.DELIVERY_RETRY_MAX = timedelta(seconds=1)
    with receivers(delivery_settings, sink, destinations) as sinks:
        down, *others = sinks
        create_due_users(200)
        keys = set(Event.objects.filter(status=EventStatus.PENDING).values_list("idempotency_key", flat=True))
        state = {"up": False}
        down.respond = lambda received: Reply() if state["up"] else Reply(status=503)

        # When the fleet runs through the outage (probes at most 1 s apart for the test)
        processes = start_fleet(
            delivery_settings,
            tmp_path,
            DELIVERY_MAX_ATTEMPTS=3,
            ENDPOINT_PROBE_FIRST_INTERVAL="0.25s",
            ENDPOINT_PROBE_MAX_INTERVAL="1s",
        )
        try:
            # From the first 503 (the fleet may take seconds to start on a loaded machine)
            assert down.wait_for(1, timeout=60)
            down_since = time.monotonic()
            went_failing = eventually(
                lambda: Endpoint.objects.filter(key=key_of(down.url), state=EndpointState.FAILING).exists(),
                timeout=8,
                interval=0.05,
            )
            # the others take everything meanwhile: the receiver that is down holds back no one
            for other in others:
                assert other.wait_for(200, timeout=60, accepted=True), f"only {len(other.accepted())} of 200"
            assert not down.accepted()
            time.sleep(max(0.0, down_since + 8 - time.monotonic()))
            state["up"] = True
            assert down.wait_for(200, timeout=60, accepted=True), (
                f"only {len(down.accepted())} of 200 accepted"
            )
            wait_until(settled, 60, "every outcome recorded")
        finally:
            codes = stop_all(processes)

    # Then the endpoint went FAILING and back, nothing is DEAD, and every receiver accepted everything once
    assert codes == [0, 0, 0]
    assert went_failing
    assert set(Endpoint.objects.values_list("state", flat=True)) == {EndpointState.HEALTHY}
    assert_each_receiver_accepted_each_key_once(sinks, keys)
    assert_every_delivery_delivered_and_event_completed(events=200, destinations=destinations)
    # While it was down, one probe at a time: far fewer requests than 200 deliveries x 3 attempts
    during_outage = [r for r in down.received if r.status == 503]
    assert len(during_outage) < 200 + 40
    assert not DeliveryAttempt.objects.filter(delivery__status=DeliveryStatus.DEAD).exists()


def _ok_count(sink) -> int:
    return len({r.idempotency_key for r in sink.received if r.status == 200})


def test_a_retry_after_told_to_one_worker_holds_back_both(delivery_settings, sink, tmp_path):
    # Given a receiver that answers its 50th request with 429 Retry-After: 3 and
    # everything else at once, and two workers sending 2 at a time each (~40/s each)
    create_due_users(600)
    counter = {"n": 0}

    def respond(received):
        with sink.lock:
            counter["n"] += 1
            n = counter["n"]
        return Reply(status=429, headers={"Retry-After": "3"}) if n == 50 else Reply(delay=0.05)

    sink.respond = respond
    processes = start_fleet(delivery_settings, tmp_path, worker_args=("--concurrency", "2"))
    try:
        assert sink.wait_for(600, timeout=120), f"only {len(set(sink.keys()))} of 600 arrived"
        wait_until(settled, 30, "every outcome recorded")
    finally:
        codes = stop_all(processes)

    # Then after the 429 (and the second or so the other worker takes to read the
    # endpoint's row) no request reaches the receiver until the 3 s are over
    assert codes == [0, 0, 0]
    throttled = next(r for r in sink.received if r.status == 429)
    quiet = [
        r for r in sink.received if throttled.received_at + 1.6 < r.received_at < throttled.received_at + 2.9
    ]
    assert quiet == []
    assert_all_delivered_once(sink, 600)
    # And the throttled delivery spent no attempt: it is delivered with its budget intact
    delivery = Delivery.objects.get(idempotency_key=throttled.idempotency_key)
    assert delivery.max_attempts == delivery_settings.DELIVERY_MAX_ATTEMPTS + 1


def test_the_fleet_rate_cap_holds_over_two_workers(delivery_settings, sink, tmp_path):
    # Given WEBHOOK_MAX_RATE=100 and 500 greetings due to a receiver that answers at once
    create_due_users(500)

    processes = start_fleet(delivery_settings, tmp_path, WEBHOOK_MAX_RATE=100)
    try:
        assert sink.wait_for(500, timeout=60), f"only {len(set(sink.keys()))} of 500 arrived"
        wait_until(settled, 30, "every outcome recorded")
    finally:
        codes = stop_all(processes)

    # Then the receiver never saw more than 100 a second, and the cap was used
    assert codes == [0, 0, 0]
    assert_all_delivered_once(sink, 500)
    assert_rate_held(sink.received, rate=100, used=90)
    assert {r.headers.get("User-Agent") for r in sink.received}  # both workers sent (keys split between them)


def learned_rates(ports) -> list[float]:
    """Each worker's birthday_worker_learned_rate for the one endpoint, from its metrics port."""
    rates = []
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            body = response.read().decode()
        found = re.search(r"^birthday_worker_learned_rate\{[^}]*\} (\S+)$", body, re.M)
        rates.append(float(found.group(1)) if found else 0.0)
    return rates


def start_fleet_with_metrics(settings, tmp_path, **env_extra):
    """One scheduler and two workers as shipped, each worker serving its metrics; the processes and the ports."""
    env = process_env(settings, **env_extra)
    ports = [free_port(), free_port()]
    processes = [start_process(["run_scheduler"], env, tmp_path / "scheduler.log")]
    processes += [
        start_process(["run_worker", "--metrics-port", str(port)], env, tmp_path / f"worker{i}.log")
        for i, port in enumerate(ports)
    ]
    return processes, ports


@pytest.mark.parametrize("max_rate", [0, 200])
def test_a_receiver_behind_a_rate_limit_is_paced_at_a_rate_learnt_from_its_429s(
    delivery_settings, sink, tmp_path, max_rate
):
    # Given a receiver that takes 40 requests a second (a tenth of a second's burst) and refuses
    # the rest at once with 429 and no Retry-After, and 400 greetings due; with no fleet cap, or
    # one far above the receiver's
    sink.respond = RateLimiter(rate=40, burst=4, latency=0.05)
    create_due_users(400)

    # When one scheduler and two workers run with the shipped settings
    processes, ports = start_fleet_with_metrics(delivery_settings, tmp_path, WEBHOOK_MAX_RATE=max_rate)
    try:
        assert eventually(lambda: _ok_count(sink) == 400, timeout=120), (
            f"only {_ok_count(sink)} of 400 accepted"
        )
        wait_until(settled, 30, "every outcome recorded")
        rates = learned_rates(ports)
    finally:
        codes = stop_all(processes)

    # Then the receiver did refuse, and the workers learnt a rate from it, of the receiver's order
    assert codes == [0, 0, 0]
    assert any(r.status == 429 for r in sink.received)
    assert max(rates) > 0, rates
    assert sum(rates) <= 40 * 1.5, rates
    # And its refusals never made the endpoint failing; everything arrived once, nothing is DEAD
    logs = "".join((tmp_path / f"worker{i}.log").read_text() for i in range(2))
    assert "Endpoint failing" not in logs
    assert Endpoint.objects.get().state == EndpointState.HEALTHY
    assert_all_delivered_once(sink, 400)
    # And no refusal spent an attempt: each one gave its delivery one more, so every delivery kept its
    # budget but for its failures of another kind (none on a quiet machine; on one running other
    # process tests beside this, a request can outlast the 2 s timeout, and that one is charged)
    charged = Counter(
        DeliveryAttempt.objects.exclude(outcome=AttemptOutcome.DELIVERED)
        .exclude(status_code=429)
        .values_list("delivery_id", flat=True)
    )
    budgets = {d.pk: d.max_attempts - d.attempts + charged[d.pk] for d in Delivery.objects.all()}
    others = list(
        DeliveryAttempt.objects.exclude(outcome=AttemptOutcome.DELIVERED)
        .exclude(status_code=429)
        .values_list("outcome", "status_code", "error")
    )
    assert set(budgets.values()) == {delivery_settings.DELIVERY_MAX_ATTEMPTS - 1}, others
    assert len(others) <= 2, others  # a timeout or two under load, never the refusals themselves


def test_a_fleet_rate_cap_below_a_receivers_limit_still_holds_over_two_workers(
    delivery_settings, sink, tmp_path
):
    # Given WEBHOOK_MAX_RATE=25 and a receiver that would take 40 a second, refusing the rest with 429
    sink.respond = RateLimiter(rate=40, burst=4, latency=0.05)
    create_due_users(250)

    processes = start_fleet(delivery_settings, tmp_path, WEBHOOK_MAX_RATE=25)
    try:
        assert eventually(lambda: _ok_count(sink) == 250, timeout=120), (
            f"only {_ok_count(sink)} of 250 accepted"
        )
        wait_until(settled, 30, "every outcome recorded")
    finally:
        codes = stop_all(processes)

    # Then the stricter of the two, the fleet's cap, holds: the receiver never sees more than 25 requests a
    # second (refused ones included), and everything arrived once
    assert codes == [0, 0, 0]
    assert_rate_held(sink.received, rate=25)
    assert_all_delivered_once(sink, 250)


def test_the_fleet_in_flight_cap_holds_over_two_workers(delivery_settings, sink, tmp_path):
    # Given WEBHOOK_MAX_IN_FLIGHT=20 and a receiver that holds each request 100 ms
    sink.default = Reply(delay=0.1)
    create_due_users(600)

    processes = start_fleet(delivery_settings, tmp_path, WEBHOOK_MAX_IN_FLIGHT=20)
    try:
        assert sink.wait_for(600, timeout=90), f"only {len(set(sink.keys()))} of 600 arrived"
        wait_until(settled, 30, "every outcome recorded")
    finally:
        codes = stop_all(processes)

    # Then never more than 20 requests were open at once, over both workers
    assert codes == [0, 0, 0]
    assert_all_delivered_once(sink, 600)
    assert 10 <= peak_open(sink.received, hold=0.1) <= 20


def test_pause_holds_every_worker_within_seconds_and_resume_drains_the_backlog(
    delivery_settings, sink, tmp_path
):
    # Given two workers sending to a receiver that answers in 50 ms at 2 at a time each
    sink.default = Reply(delay=0.05)
    create_due_users(800)
    processes = start_fleet(delivery_settings, tmp_path, worker_args=("--concurrency", "2"))
    try:
        assert sink.wait_for(50, timeout=30)

        # When an operator pauses the endpoint
        endpoint_pause(endpoint=Endpoint.objects.get(), operator="ops")
        paused_at = sink.received[-1].received_at
        time.sleep(4)
        arrived_while_paused = [r for r in sink.received if r.received_at > paused_at + 2.0]
        waiting = Delivery.objects.filter(status=DeliveryStatus.QUEUED).count()

        # Then within two seconds nothing more is sent, and the backlog stays QUEUED
        assert arrived_while_paused == []
        assert waiting > 0
        assert not Delivery.objects.filter(status=DeliveryStatus.SENDING).exists()

        # And resuming drains it
        endpoint_resume(endpoint=Endpoint.objects.get(), operator="ops")
        assert sink.wait_for(800, timeout=90), f"only {len(set(sink.keys()))} of 800 arrived"
        wait_until(settled, 30, "every outcome recorded")
    finally:
        codes = stop_all(processes)

    assert codes == [0, 0, 0]
    assert_all_delivered_once(sink, 800)


def test_a_receiver_down_past_event_max_lateness_fails_the_events_with_the_reason(
    delivery_settings, sink, tmp_path
):
    # Given EVENT_MAX_LATENESS of 4 s and a receiver that never answers but 503
    sink.default = Reply(status=503)
    processes = start_fleet(delivery_settings, tmp_path, workers=1, EVENT_MAX_LATENESS="4s")
    try:
        # Due only once both run: on a loaded machine a start slower than 4 s would
        # make them too late at the claim, and the worker's giving up untested.
        wait_until(
            lambda: all(started(tmp_path / log) for log in ("scheduler.log", "worker0.log")), 60, "the start"
        )
        create_due_users(20)
        wait_until(
            lambda: Event.objects.filter(status=EventStatus.FAILED).count() == 20, 40, "the events to fail"
        )
    finally:
        codes = stop_all(processes)

    # Then every event is FAILED naming EVENT_MAX_LATENESS, and none ran out of attempts first
    assert codes == [0, 0]
    reasons = set(Event.objects.filter(status=EventStatus.FAILED).values_list("failure_reason", flat=True))
    assert all("EVENT_MAX_LATENESS" in reason for reason in reasons), reasons
    assert not Event.objects.filter(failure_reason__startswith="Gave up").exists()
