from django.conf import settings
from django.http import HttpRequest


def client_address(request: HttpRequest) -> str:
    """The address of the client, seen through TRUSTED_PROXY_COUNT reverse proxies.

    Each trusted proxy appends the address it received the request from to
    X-Forwarded-For, so the client is the entry that many places from the right;
    anything further left was written by the client and could be forged. With no
    trusted proxies (the default) the socket's peer is the client and
    X-Forwarded-For is ignored. Lock-outs, throttles and the metrics allow-list
    all ask this one function, so they can never disagree about who is calling.
    """
    peer = request.META.get("REMOTE_ADDR", "")
    count = settings.TRUSTED_PROXY_COUNT
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR")
    if count == 0 or not forwarded:
        return peer
    hops = [hop.strip() for hop in forwarded.split(",") if hop.strip()]
    if not hops:
        return peer
    return hops[-min(count, len(hops))]
