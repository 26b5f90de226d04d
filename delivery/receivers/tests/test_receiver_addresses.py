"""Which receivers the worker may reach (SSRF): the rules as a table, and the check at creation."""

import socket
import threading
import time
from ipaddress import ip_address, ip_network

import pytest
from django.core.exceptions import ValidationError

from delivery.receivers.addresses import ReceiverPolicy, address_refusal, url_refusal, webhook_url_validate

STRICT = ReceiverPolicy(allow_http=False, allowed_networks=())


def allowing(*networks: str, http: bool = False) -> ReceiverPolicy:
    return ReceiverPolicy(allow_http=http, allowed_networks=tuple(ip_network(n) for n in networks))


def refusal_of(address: str, policy: ReceiverPolicy = STRICT) -> str | None:
    refusal = address_refusal(address=ip_address(address), policy=policy)
    return refusal.describe() if refusal else None


@pytest.mark.parametrize(
    "address, kind",
    [
        ("127.0.0.1", "a loopback address"),
        ("127.255.0.9", "a loopback address"),
        ("10.0.0.5", "a private address"),
        ("172.16.0.1", "a private address"),
        ("192.168.1.1", "a private address"),
        ("100.64.0.1", "a shared (carrier-grade NAT) address"),
        ("169.254.1.1", "a link-local address"),
        ("0.0.0.0", "an unspecified address"),
        ("224.0.0.1", "a multicast address"),
        ("255.255.255.255", "a reserved address"),
        ("192.0.2.10", "a reserved address"),
        ("198.18.0.1", "a reserved address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("169.254.170.2", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("168.63.129.16", "a cloud metadata address"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("::1", "a loopback address"),
        ("::", "an unspecified address"),
        ("fe80::1", "a link-local address"),
        ("fc00::1", "a unique local (private) address"),
        ("fd12:3456::1", "a unique local (private) address"),
        ("fec0::1", "a site-local (private) address"),
        ("ff02::1", "a multicast address"),
        ("64:ff9b:1::1", "a private address"),
        ("2001::1", "a reserved address"),
        ("2001:db8::1", "a reserved address"),
        ("::1:0:0:1", "a reserved address"),  # in ::/8, outside the forms that embed IPv4
    ],
)
def test_addresses_behind_us_are_refused_with_their_kind(address, kind):
    assert refusal_of(address) == f"Refused: {ip_address(address)} is {kind} (WEBHOOK_ALLOWED_NETWORKS" + (
        ", naming it alone)" if kind == "a cloud metadata address" else ")"
    )


@pytest.mark.parametrize(
    "address, embedded, kind",
    [
        ("::ffff:127.0.0.1", "127.0.0.1", "a loopback address"),  # IPv4-mapped
        ("::ffff:10.0.0.5", "10.0.0.5", "a private address"),
        ("::ffff:169.254.169.254", "169.254.169.254", "a cloud metadata address"),
        ("::ffff:100.100.100.200", "100.100.100.200", "a cloud metadata address"),
        ("::ffff:0:10.0.0.5", "10.0.0.5", "a private address"),  # IPv4-translated
        ("64:ff9b::10.0.0.5", "10.0.0.5", "a private address"),  # NAT64
        ("64:ff9b::169.254.169.254", "169.254.169.254", "a cloud metadata address"),
        ("2002:a00:5::1", "10.0.0.5", "a private address"),  # 6to4
        ("::127.0.0.1", "127.0.0.1", "a loopback address"),  # IPv4-compatible
    ],
)
def test_ipv6_forms_that_carry_a_refused_ipv4_address_are_refused_as_that_address(address, embedded, kind):
    refusal = address_refusal(address=ip_address(address), policy=STRICT)

    assert refusal.kind == kind
    assert str(refusal.embedded) == embedded
    assert refusal.describe().startswith(f"Refused: {ip_address(address)} (embedding {embedded}) is {kind}")


@pytest.mark.parametrize(
    "address",
    ["93.184.215.14", "8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1"],
)
def test_public_addresses_are_allowed(address):
    assert refusal_of(address) is None


@pytest.mark.parametrize(
    "networks, address, allowed",
    [
        (["10.0.0.0/8"], "10.0.0.5", True),
        (["10.0.0.0/8"], "::ffff:10.0.0.5", True),
        (["10.0.0.0/8"], "192.168.1.1", False),
        (["127.0.0.0/8", "::1/128"], "127.0.0.1", True),
        (["127.0.0.0/8", "::1/128"], "::1", True),
        (["127.0.0.0/8", "::1/128"], "::ffff:127.0.0.1", True),
        (["127.0.0.0/8", "::1/128"], "10.0.0.5", False),
        (["fd00::/8"], "fd12::1", True),
        # A metadata address only by an entry that names it alone: a wide network never opens it.
        (["169.254.0.0/16"], "169.254.1.1", True),
        (["169.254.0.0/16"], "169.254.169.254", False),
        (["100.64.0.0/10"], "100.100.100.200", False),
        (["fd00::/8"], "fd00:ec2::254", False),
        (["0.0.0.0/0"], "168.63.129.16", False),
        (["169.254.169.254/32"], "169.254.169.254", True),
        (["169.254.169.254/32"], "::ffff:169.254.169.254", True),
    ],
)
def test_listed_networks_allow_what_they_contain(networks, address, allowed):
    assert (refusal_of(address, allowing(*networks)) is None) == allowed


def test_the_refusal_names_the_address_and_the_setting_that_would_allow_it():
    assert refusal_of("10.0.0.5") == "Refused: 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)"


@pytest.mark.parametrize(
    "url, policy, refusal",
    [
        ("https://receiver.example/hook", STRICT, None),
        (
            "http://receiver.example/hook",
            STRICT,
            "Refused: http://receiver.example/… is not https (WEBHOOK_ALLOW_HTTP)",
        ),
        ("http://receiver.example/hook", allowing(http=True), None),
        (
            "ftp://receiver.example/hook",
            allowing(http=True),
            "Refused: not an https URL with a host",
        ),
        ("https:///hook", STRICT, "Refused: not an https URL with a host"),
        ("receiver.example/hook", STRICT, "Refused: not an https URL with a host"),
        ("https://[::1/hook", STRICT, "Refused: not a URL"),
        (
            "https://10.0.0.5/hook",
            STRICT,
            "Refused: 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)",
        ),
        ("https://10.0.0.5/hook", allowing("10.0.0.0/8"), None),
        (
            "https://[::ffff:a9fe:a9fe]/latest",
            STRICT,
            "Refused: ::ffff:a9fe:a9fe (embedding 169.254.169.254) is a "
            "cloud metadata address (WEBHOOK_ALLOWED_NETWORKS, naming it alone)",
        ),
        (
            "https://[fe80::1%25eth0]/hook",
            STRICT,
            "Refused: fe80::1 is a link-local address (WEBHOOK_ALLOWED_NETWORKS)",
        ),
        ("https://2130706433/hook", STRICT, "Refused: 2130706433 is not an address in dotted form"),
        ("https://127.1/hook", allowing("127.0.0.0/8"), "Refused: 127.1 is not an address in dotted form"),
        ("http://127.0.0.1:8001/webhook", allowing("127.0.0.0/8", http=True), None),
    ],
)
def test_a_url_is_judged_by_its_scheme_and_a_literal_address_before_any_dns(url, policy, refusal):
    assert url_refusal(url=url, policy=policy) == refusal


def answers(*addresses: str):
    def resolve(host: str, port: int) -> list[str]:
        return list(addresses)

    return resolve


def refused_message(url: str, **options) -> str | None:
    try:
        webhook_url_validate(url=url, **options)
    except ValidationError as exc:
        assert exc.code == "refused_url"
        return exc.message
    return None


def test_a_name_that_resolves_only_to_refused_addresses_is_refused_at_creation():
    message = refused_message(
        "https://internal.example/hook", policy=STRICT, resolve=answers("10.0.0.5", "127.0.0.1")
    )

    assert message == "Refused: internal.example at 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)"


def test_a_name_with_one_public_address_is_accepted_the_worker_connects_to_that_one_only():
    assert (
        refused_message(
            "https://mixed.example/hook", policy=STRICT, resolve=answers("10.0.0.5", "93.184.215.14")
        )
        is None
    )


def test_a_name_that_does_not_resolve_now_is_accepted_and_left_to_the_check_at_each_connection():
    def no_such_name(host, port):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    assert refused_message("https://not-yet.example/hook", policy=STRICT, resolve=no_such_name) is None


def test_a_name_whose_dns_does_not_answer_in_time_is_accepted_without_waiting_for_it(monkeypatch):
    monkeypatch.setattr("delivery.receivers.addresses.RESOLVE_TIMEOUT", 0.1)
    answered = threading.Event()

    def unanswering(host, port):
        answered.wait(5)
        return ["10.0.0.5"]

    started = time.monotonic()
    message = refused_message("https://slow-dns.example/hook", policy=STRICT, resolve=unanswering)

    answered.set()
    assert message is None
    assert time.monotonic() - started < 2


def test_a_literal_refused_address_and_plain_http_are_refused_without_dns():
    def no_dns(host, port):
        raise AssertionError("resolved a URL refused before DNS")

    assert refused_message("https://169.254.169.254/latest/meta-data/", policy=STRICT, resolve=no_dns) == (
        "Refused: 169.254.169.254 is a cloud metadata address (WEBHOOK_ALLOWED_NETWORKS, naming it alone)"
    )
    assert refused_message("http://receiver.example/", policy=STRICT, resolve=no_dns) == (
        "Refused: http://receiver.example/… is not https (WEBHOOK_ALLOW_HTTP)"
    )


def test_localhost_resolved_by_this_machine_is_refused_unless_loopback_is_listed():
    assert refused_message("https://localhost/hook", policy=STRICT).startswith("Refused: localhost at ")
    assert refused_message("https://localhost/hook", policy=allowing("127.0.0.0/8", "::1/128")) is None


def test_the_policy_defaults_to_the_settings(settings):
    settings.WEBHOOK_ALLOW_HTTP = False
    settings.WEBHOOK_ALLOWED_NETWORKS = [ip_network("10.0.0.0/8")]

    assert refused_message("https://10.1.2.3/hook") is None
    assert refused_message("https://192.168.1.1/hook") is not None
    assert refused_message("http://10.1.2.3/hook") is not None
