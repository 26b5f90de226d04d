"""Receivers behind us are never reached (SSRF, issue 28 point 5): the scheduler and worker in-process
against real local receivers, with DNS and the network scripted (delivery/tests/pipeline.py).

Each refusal has its twin with the network listed, which reaches the receiver: so a refusal
test would fail, with the request arriving, if the address were let through.
"""

import re
import subprocess
import sys
from datetime import date
from ipaddress import ip_network

import pytest
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.core.management import call_command

from delivery.dispatch.scheduler import Scheduler
from delivery.models import AttemptOutcome, Delivery, DeliveryStatus, Endpoint, EndpointState
from delivery.receivers.addresses import webhook_url_validate
from delivery.tests.pipeline import (
    BASE_DIR,
    ScriptedDns,
    key_of,
    make_due,
    process_env,
    shown_attempts,
    start_process,
)
from delivery.worker.loop import Worker
from scheduling.models import Event, EventStatus
from users.services import user_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def receivers(delivery_settings, monkeypatch):
    """Plain http allowed (the sinks are http), no network listed: what is judged is the address."""
    delivery_settings.WEBHOOK_ALLOW_HTTP = True
    delivery_settings.WEBHOOK_ALLOWED_NETWORKS = []
    return delivery_settings


def use_dns(monkeypatch, dns: ScriptedDns) -> None:
    """The worker's resolver (the one it screens) and the check at creation both ask `dns`."""
    monkeypatch.setattr("delivery.receivers.transport.DefaultResolver", lambda: dns)
    monkeypatch.setattr("delivery.receivers.addresses.host_addresses", dns)


def greeting_queued_to(url: str, settings):
    """A due greeting, claimed by the scheduler into a delivery to `url`; its event."""
    settings.WEBHOOK_URL = url
    user = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 8), timezone="Europe/London"
    )
    event = user.events.get()
    make_due([event])
    Scheduler(once=True).run()
    return event


def sink_url_at(sink, host: str) -> str:
    return sink.url.replace("127.0.0.1", host)


CASES = [
    # host in the URL, what DNS answers, the network an operator would list, the refusal
    (
        "receiver.test",
        ["127.0.0.1"],
        "127.0.0.0/8",
        "Refused: receiver.test at 127.0.0.1 is a loopback address (WEBHOOK_ALLOWED_NETWORKS)",
    ),
    (
        "receiver.test",
        ["10.0.0.5"],
        "10.0.0.0/8",
        "Refused: receiver.test at 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)",
    ),
    (
        "receiver.test",
        ["169.254.169.254"],
        "169.254.169.254/32",
        "Refused: receiver.test at 169.254.169.254 is a cloud metadata address (WEBHOOK_ALLOWED_NETWORKS, naming it alone)",
    ),
    ("10.0.0.5", None, "10.0.0.0/8", "Refused: 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)"),
    (
        "[::ffff:a9fe:a9fe]",
        None,
        "169.254.169.254/32",
        "Refused: ::ffff:a9fe:a9fe (embedding 169.254.169.254) is a cloud metadata address "
        "(WEBHOOK_ALLOWED_NETWORKS, naming it alone)",
    ),
]


@pytest.mark.parametrize("host, answers, network_listed, refusal", CASES)
def test_a_receiver_behind_us_gets_no_request_and_the_delivery_is_dead_with_the_reason(
    receivers, sink, network, monkeypatch, host, answers, network_listed, refusal
):
    # Given a greeting queued to a receiver whose address is behind us, a real receiver there
    for address in ("10.0.0.5", "169.254.169.254", "::ffff:a9fe:a9fe"):
        network.route(address, to=sink.url)
    use_dns(monkeypatch, ScriptedDns({host: [answers]} if answers else {}))
    url = sink_url_at(sink, host)
    event = greeting_queued_to(url, receivers)

    # When the worker sends
    Worker(once=True).run()

    # Then nothing reached the receiver, and the delivery is DEAD with the reason, its event FAILED
    assert sink.received == []
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD
    assert delivery.last_error == f"Permanent failure: {refusal}"
    assert list(shown_attempts(delivery, "outcome", "status_code", "error")) == [
        (AttemptOutcome.PERMANENT_FAILURE, None, refusal)
    ]
    event.refresh_from_db()
    assert (event.status, event.failure_reason) == (EventStatus.FAILED, f"Permanent failure: {refusal}")
    # and the receiver's health is untouched: our rule refused, the receiver did not fail
    assert list(
        Endpoint.objects.filter(key=key_of(url)).values_list("state", "consecutive_failures", "last_error")
    ) == [(EndpointState.HEALTHY, 0, "")]


@pytest.mark.parametrize("host, answers, network_listed, refusal", CASES)
def test_the_same_receiver_is_reached_once_the_operator_lists_its_network(
    receivers, sink, network, monkeypatch, host, answers, network_listed, refusal
):
    for address in ("10.0.0.5", "169.254.169.254", "::ffff:a9fe:a9fe"):
        network.route(address, to=sink.url)
    use_dns(monkeypatch, ScriptedDns({host: [answers]} if answers else {}))
    receivers.WEBHOOK_ALLOWED_NETWORKS = [ip_network(network_listed)]
    event = greeting_queued_to(sink_url_at(sink, host), receivers)

    Worker(once=True).run()

    assert len(sink.received) == 1
    assert Delivery.objects.get(event=event).status == DeliveryStatus.DELIVERED


def test_a_name_whose_answer_changes_between_the_check_and_the_connection_is_refused_at_the_connection(
    receivers, sink, monkeypatch
):
    # Given a name that answers a public address when the receiver is set, and 127.0.0.1 after
    dns = ScriptedDns({"rebind.test": [["93.184.215.14"], ["127.0.0.1"]]})
    use_dns(monkeypatch, dns)
    url = sink_url_at(sink, "rebind.test")
    webhook_url_validate(url=url)  # accepted when set: it resolved to a public address
    event = greeting_queued_to(url, receivers)

    # When the worker connects, resolving the name again
    Worker(once=True).run()

    # Then the address it would connect to now, loopback, is refused: no request reached the receiver there
    assert dns.asked == ["rebind.test", "rebind.test"]
    assert sink.received == []
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD
    assert delivery.last_error == (
        "Permanent failure: Refused: rebind.test at 127.0.0.1 is a loopback address (WEBHOOK_ALLOWED_NETWORKS)"
    )


def test_a_name_that_resolves_only_to_addresses_behind_us_is_refused_when_it_is_set(receivers, monkeypatch):
    use_dns(monkeypatch, ScriptedDns({"metadata.test": [["169.254.169.254", "fd00:ec2::254"]]}))

    with pytest.raises(ValidationError) as refused:
        webhook_url_validate(url="https://metadata.test/latest/meta-data/")

    assert refused.value.messages == [
        "Refused: metadata.test at 169.254.169.254 is a cloud metadata address "
        "(WEBHOOK_ALLOWED_NETWORKS, naming it alone)"
    ]


@pytest.mark.parametrize("command", ["run_scheduler", "run_worker"])
@pytest.mark.parametrize(
    "url, reason",
    [
        (
            "http://receiver.example/hook",
            "Refused: http://receiver.example/… is not https (WEBHOOK_ALLOW_HTTP)",
        ),
        ("https://10.0.0.5/hook", "Refused: 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)"),
        (
            "https://hooks.internal/hook",
            "Refused: hooks.internal at 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)",
        ),
    ],
)
def test_a_process_refuses_to_start_with_a_webhook_url_behind_us_and_queues_nothing(
    receivers, monkeypatch, command, url, reason
):
    # Given the production policy, a WEBHOOK_URL it refuses, and a greeting due
    receivers.WEBHOOK_ALLOW_HTTP = False
    receivers.WEBHOOK_URL = url
    use_dns(monkeypatch, ScriptedDns({"hooks.internal": [["10.0.0.5"]]}))
    event = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 8), timezone="UTC"
    ).events.get()
    make_due([event])

    # When the process starts, then it stops at once, naming the setting and the reason
    with pytest.raises(ImproperlyConfigured) as refused:
        call_command(command, once=True)

    assert str(refused.value) == f"WEBHOOK_URL: {reason}"
    # and the greeting waits, still PENDING, for the setting to be fixed
    assert Event.objects.get(pk=event.pk).status == EventStatus.PENDING
    assert not Delivery.objects.exists()


@pytest.mark.slow
def test_a_worker_process_with_a_loopback_webhook_url_stops_in_one_line(receivers):
    receivers.WEBHOOK_URL = "http://127.0.0.1:9/hook"

    result = subprocess.run(
        [sys.executable, "manage.py", "run_worker", "--once"],
        cwd=BASE_DIR,
        env=process_env(receivers),
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert result.returncode == 1
    assert result.stderr.endswith(
        "error: WEBHOOK_URL: Refused: 127.0.0.1 is a loopback address (WEBHOOK_ALLOWED_NETWORKS)\n"
    )


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the worker process reads what this test wrote
def test_a_worker_process_sends_nothing_queued_for_a_name_that_resolves_to_loopback(
    receivers, sink, tmp_path
):
    # Given a greeting queued to the sink as http://localhost:port (before the policy refused it)
    event = greeting_queued_to(sink_url_at(sink, "localhost"), receivers)
    # and a worker process that lists no network, its own WEBHOOK_URL a name it cannot resolve yet
    receivers.WEBHOOK_URL = "https://receiver.invalid/webhook"
    worker = start_process(["run_worker", "--once"], process_env(receivers), tmp_path / "worker.log")

    # When it has run (this machine's own DNS answers for localhost)
    assert worker.wait(timeout=120) == 0, (tmp_path / "worker.log").read_text()

    # Then nothing reached the receiver, and the delivery is DEAD with the reason
    assert sink.received == []
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD
    assert re.fullmatch(
        r"Permanent failure: Refused: localhost at (127\.0\.0\.1|::1) is a loopback address \(WEBHOOK_ALLOWED_NETWORKS\)",
        delivery.last_error,
    ), delivery.last_error
