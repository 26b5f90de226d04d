"""Who may read /metrics: a bearer token, or an address in an allowed network."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Sequence
from ipaddress import IPv4Network, IPv6Network, ip_address

from django.conf import settings
from django.http import HttpRequest

from config.client_address import client_address


class MetricsAccess(enum.Enum):
    ALLOWED = "allowed"
    # The token would let the caller in: 401, with a WWW-Authenticate challenge.
    UNAUTHENTICATED = "unauthenticated"
    # No token is configured and the address is not allowed: 403.
    FORBIDDEN = "forbidden"


def metrics_access(*, request: HttpRequest) -> MetricsAccess:
    """Decide a request for /metrics from METRICS_TOKEN and METRICS_ALLOWED_NETWORKS.

    The address is the client's as config.client_address reads it. A request
    that says it was forwarded while no trusted proxy is configured
    (TRUSTED_PROXY_COUNT 0) is admitted by the token only: its address is a
    proxy's, and nginx on the same host forwards everyone as 127.0.0.1.
    """
    token = settings.METRICS_TOKEN
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if (
        token
        and scheme.lower() == "bearer"
        and secrets.compare_digest(credentials.strip().encode(), token.encode())
    ):
        return MetricsAccess.ALLOWED
    forwarded = any(header in request.headers for header in ("X-Forwarded-For", "Forwarded"))
    trusted_address = settings.TRUSTED_PROXY_COUNT or not forwarded
    if trusted_address and _in_networks(client_address(request), settings.METRICS_ALLOWED_NETWORKS):
        return MetricsAccess.ALLOWED
    return MetricsAccess.UNAUTHENTICATED if token else MetricsAccess.FORBIDDEN


def _in_networks(address: str, networks: Sequence[IPv4Network | IPv6Network]) -> bool:
    try:
        parsed = ip_address(address)
    except ValueError:
        return False  # no address (a Unix socket) or a malformed one: never trusted
    # A server listening on [::] sees IPv4 clients as ::ffff:a.b.c.d.
    if parsed.version == 6 and parsed.ipv4_mapped is not None:
        parsed = parsed.ipv4_mapped
    return any(parsed in network for network in networks)
