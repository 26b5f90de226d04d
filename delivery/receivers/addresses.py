"""Which receivers the worker may reach: https only, and never the networks behind us (SSRF).

Whoever sets a receiver URL (WEBHOOK_URL today; an operator's API call for a
destination) could otherwise aim the worker at what only our hosts can reach:
their loopback, the private network around them, or the cloud's metadata
service, which hands out the host's credentials (169.254.169.254). So:

* a URL must be https, unless WEBHOOK_ALLOW_HTTP (development: the local sink);
* the worker never connects to an address in REFUSED_NETWORKS (loopback,
  private, shared, link-local, multicast, unspecified and reserved ranges, and
  the IPv6 forms that embed such an IPv4 address), unless it lies in a network
  of WEBHOOK_ALLOWED_NETWORKS (receivers on premises). A cloud metadata address
  (CLOUD_METADATA) is allowed only by an entry that names it alone: listing
  100.64.0.0/10 for a VPN must not open Alibaba's 100.100.100.200 with it;
* the addresses are checked where they are connected to, after DNS
  (delivery.receivers.resolver), so a name whose answer changes between the check at
  creation and the connection (DNS rebinding) is refused at the connection.

The rules are pure functions of an address or a URL and the policy; only
webhook_url_validate resolves names, for the check at creation.
"""

from __future__ import annotations

import socket
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import yarl
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError

from delivery.credentials.receiver_urls import USERINFO_REFUSED, url_redact

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

PRIVATE = "a private address"
RESERVED = "a reserved address"

# Special-purpose ranges (the IANA IPv4 and IPv6 special-purpose address registries, less
# the few that are globally reachable), first match names the kind. The IPv6 ranges that
# embed an IPv4 address are judged by that address instead (_embedded_ipv4).
REFUSED_NETWORKS: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ip_network(network), kind)
    for network, kind in (
        ("0.0.0.0/8", "an unspecified address"),  # "this network": 0.0.0.0 reaches this host
        ("10.0.0.0/8", PRIVATE),
        ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
        ("127.0.0.0/8", "a loopback address"),
        ("169.254.0.0/16", "a link-local address"),
        ("172.16.0.0/12", PRIVATE),
        ("192.0.0.0/24", RESERVED),  # IETF protocol assignments
        ("192.0.2.0/24", RESERVED),  # documentation
        ("192.88.99.0/24", RESERVED),  # the deprecated 6to4 relay anycast
        ("192.168.0.0/16", PRIVATE),
        ("198.18.0.0/15", RESERVED),  # benchmarking
        ("198.51.100.0/24", RESERVED),  # documentation
        ("203.0.113.0/24", RESERVED),  # documentation
        ("224.0.0.0/4", "a multicast address"),
        ("240.0.0.0/4", RESERVED),  # 255.255.255.255, the broadcast address, included
        ("::/128", "an unspecified address"),
        ("::1/128", "a loopback address"),
        ("64:ff9b:1::/48", PRIVATE),  # local-use IPv4/IPv6 translation
        ("::/8", RESERVED),  # what is left of it once the forms that embed IPv4 are unwrapped
        ("100::/63", RESERVED),  # discard-only and dummy prefixes
        ("2001::/23", RESERVED),  # IETF protocol assignments, Teredo included
        ("2001:db8::/32", RESERVED),  # documentation
        ("3fff::/20", RESERVED),  # documentation
        ("5f00::/16", RESERVED),  # segment routing
        ("fc00::/7", "a unique local (private) address"),  # fd00::/8 included
        ("fe80::/10", "a link-local address"),
        ("fec0::/10", "a site-local (private) address"),
        ("ff00::/8", "a multicast address"),
    )
)

# Where clouds serve instance metadata and credentials to the host itself.
CLOUD_METADATA: frozenset[IPAddress] = frozenset(
    ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, Oracle, Hetzner...
        "169.254.170.2",  # AWS ECS task credentials
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure's host (WireServer): a public address, reachable only from inside Azure
    )
)

# IPv6 ranges whose last 32 bits are an IPv4 address the packet ends up at.
_IPV4_IN_LOW_BITS = tuple(
    ip_network(network)
    for network in (
        "::ffff:0:0/96",  # IPv4-mapped
        "::ffff:0:0:0/96",  # IPv4-translated
        "64:ff9b::/96",  # NAT64
        "::/96",  # IPv4-compatible (deprecated); :: and ::1 are judged as themselves
    )
)

# How long the check at creation waits for DNS before leaving the name to the worker's check.
RESOLVE_TIMEOUT = 5.0


@dataclass(frozen=True)
class ReceiverPolicy:
    """What the operator allows beyond https to public addresses."""

    allow_http: bool
    allowed_networks: tuple[IPNetwork, ...]

    @classmethod
    def from_settings(cls) -> ReceiverPolicy:
        return cls(
            allow_http=settings.WEBHOOK_ALLOW_HTTP, allowed_networks=tuple(settings.WEBHOOK_ALLOWED_NETWORKS)
        )


@dataclass(frozen=True)
class Refusal:
    """Why one address may not be connected to."""

    address: IPAddress
    kind: str  # "a private address"
    # The IPv4 address an IPv6 one carries (::ffff:10.0.0.5), when it is what was judged.
    embedded: IPv4Address | None = None

    def describe(self, *, host: str | None = None) -> str:
        """One line for an attempt's error and a validation message, naming the setting that would allow it."""
        subject = (
            str(self.address) if self.embedded is None else f"{self.address} (embedding {self.embedded})"
        )
        if host and host.strip("[]") != str(self.address):
            subject = f"{host} at {subject}"
        judged = self.embedded or self.address
        setting = (
            "WEBHOOK_ALLOWED_NETWORKS, naming it alone"
            if judged in CLOUD_METADATA
            else "WEBHOOK_ALLOWED_NETWORKS"
        )
        return f"Refused: {subject} is {self.kind} ({setting})"


def parse_address(text: str) -> IPAddress | None:
    """`text` as an IP address (an IPv6 zone such as %eth0 dropped), or None for a name."""
    try:
        return ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _embedded_ipv4(address: IPAddress) -> IPv4Address | None:
    if isinstance(address, IPv4Address) or address in (IPv6Address("::"), IPv6Address("::1")):
        return None
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _IPV4_IN_LOW_BITS):
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def _kind(address: IPAddress) -> str | None:
    if address in CLOUD_METADATA:
        return "a cloud metadata address"
    return next((kind for network, kind in REFUSED_NETWORKS if address in network), None)


def _listed(address: IPAddress, *, networks: Sequence[IPNetwork], alone: bool) -> bool:
    return any(address in network and (network.num_addresses == 1 or not alone) for network in networks)


def address_refusal(*, address: IPAddress, policy: ReceiverPolicy) -> Refusal | None:
    """Why the worker may not connect to `address`, or None when it may."""
    embedded = _embedded_ipv4(address)
    judged = embedded or address
    kind = _kind(judged)
    if kind is None:
        return None
    alone = judged in CLOUD_METADATA
    if any(_listed(a, networks=policy.allowed_networks, alone=alone) for a in {address, judged}):
        return None
    return Refusal(address=address, kind=kind, embedded=embedded)


def url_refusal(*, url: str, policy: ReceiverPolicy) -> str | None:
    """What is wrong with `url` before any name is resolved (scheme, host, a literal address), or None.

    The answer names the URL by its redacted form only (delivery.credentials.receiver_urls): it is a credential.
    """
    try:
        parsed = yarl.URL(url)
    except (TypeError, ValueError):
        return "Refused: not a URL"
    if parsed.scheme not in ("https", "http") or not parsed.raw_host:
        return "Refused: not an https URL with a host"
    if parsed.scheme == "http" and not policy.allow_http:
        return f"Refused: {url_redact(url)} is not https (WEBHOOK_ALLOW_HTTP)"
    host = parsed.raw_host
    address = parse_address(host)
    if address is not None:
        refusal = address_refusal(address=address, policy=policy)
        return refusal.describe() if refusal else None
    if host.replace(".", "").isdigit():
        # 2130706433 or 127.1: legacy numeric forms of an address, which aiohttp refuses to connect to.
        return f"Refused: {host} is not an address in dotted form"
    return None


def host_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to on this machine, as the worker's resolver sees them."""
    # An IP socket address's first item is the address, as text.
    return [str(info[4][0]) for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _resolve_within(
    resolve: Callable[[str, int], Sequence[str]], host: str, port: int, *, seconds: float
) -> Sequence[str] | None:
    """`resolve(host, port)`, or None if it fails or takes longer than `seconds`.

    In a daemon thread: a lookup stuck on an unanswering DNS server is left
    behind, and neither holds up the caller nor keeps the process from exiting.
    """
    answers: list[Sequence[str]] = []

    def lookup() -> None:
        try:
            answers.append(resolve(host, port))
        except (OSError, UnicodeError):
            pass

    thread = threading.Thread(target=lookup, name="receiver-dns", daemon=True)
    thread.start()
    thread.join(seconds)
    return answers[0] if answers else None


def webhook_url_validate(
    *,
    url: str,
    policy: ReceiverPolicy | None = None,
    resolve: Callable[[str, int], Sequence[str]] | None = None,
) -> None:
    """Raise ValidationError (code "refused_url") unless the worker could send to `url`.

    For a receiver being set (a destination created or changed, WEBHOOK_URL at a
    process's start). Refused: anything but https (http too with
    WEBHOOK_ALLOW_HTTP), a literal address the policy refuses, and a name every
    address of which it refuses. A name that does not resolve within
    RESOLVE_TIMEOUT is accepted: it may exist by the time it is used, and every
    connection is checked again after its own resolution (delivery.receivers.resolver).
    `policy` defaults to the settings', `resolve` to this machine's DNS (host_addresses).
    """
    policy = policy or ReceiverPolicy.from_settings()
    resolve = resolve or host_addresses
    refusal = url_refusal(url=url, policy=policy)
    if refusal:
        raise ValidationError(refusal, code="refused_url")
    parsed = yarl.URL(url)
    host, port = parsed.raw_host, parsed.port
    assert host is not None and port is not None  # url_refusal passed an http(s) URL with a host
    if parse_address(host) is not None:
        return
    answers = _resolve_within(resolve, host, port, seconds=RESOLVE_TIMEOUT)
    if answers is None:
        return
    addresses = [a for a in (parse_address(answer) for answer in answers) if a is not None]
    refusals = [address_refusal(address=a, policy=policy) for a in addresses]
    if refusals and all(refusals):
        first = refusals[0]
        assert first is not None  # all(refusals)
        raise ValidationError(first.describe(host=host), code="refused_url")


def webhook_url_setting_check() -> None:
    """Raise ImproperlyConfigured, in one line, when WEBHOOK_URL is a receiver the worker would refuse.

    For run_scheduler and run_worker at start: WEBHOOK_URL seeds the default
    destination, and refusing to start leaves the greetings PENDING or QUEUED
    until the setting is fixed, where starting would make every one of them
    DEAD. Unset, it seeds nothing and there is nothing to check.
    """
    if not settings.WEBHOOK_URL:
        return
    if "@" in urllib.parse.urlsplit(settings.WEBHOOK_URL).netloc:
        raise ImproperlyConfigured(f"WEBHOOK_URL: {USERINFO_REFUSED}")
    try:
        webhook_url_validate(url=settings.WEBHOOK_URL)
    except ValidationError as exc:
        raise ImproperlyConfigured(f"WEBHOOK_URL: {exc.messages[0]}") from None
