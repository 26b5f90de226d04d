"""The HTTP transport: one POST per delivery, its answer read by the destination's kind.

It speaks the transport protocol (delivery.receivers.protocol), which the worker's
sender and the test message speak to every transport: open, send one delivery,
close; each answer a verdict and what it says of the receiver (a signal).

Sent with aiohttp on an asyncio event loop, so that thousands of open requests
to a slow receiver cost one coroutine each instead of one thread each; the
claim and the record stay synchronous Django code between the loop's runs.

No request goes to a receiver the policy refuses (delivery.receivers.addresses,
SSRF): a URL that is not https or names a refused address is refused before
any connection, and a name only after DNS, on the addresses it resolved to
(delivery.receivers.resolver). Through a proxy the connection is the proxy's: see
WebhookTransport. A refusal is a permanent failure that made no request.
"""

from __future__ import annotations

import errno
import functools
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import yarl
from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver

from config import __version__
from delivery.credentials.receiver_urls import url_redact
from delivery.models import AttemptOutcome, DeliveryAttempt
from delivery.receivers.addresses import ReceiverPolicy, parse_address, url_refusal
from delivery.receivers.lane_settings import LaneSettings
from delivery.receivers.protocol import OUTCOME_OF, ClaimedDelivery, SendResult
from delivery.receivers.resolver import AddressRefused, ScreeningResolver
from delivery.receivers.signing import WebhookSigner
from delivery.rules.answers import Signal, signal_of
from kinds import Kind, Verdict
from kinds.base import standard_reading

USER_AGENT = f"birthday-scheduler/{__version__} (+webhooks)"
# Bodies up to this size are read whole so the connection can be reused;
# longer ones are cut after the excerpt and the connection dropped.
_READ_WHOLE_BODY_UP_TO = 64 * 1024
# How long a receiver name's addresses are used before it is resolved (and checked) again.
DNS_CACHE_SECONDS = 300


def error_class(exc: BaseException) -> str:
    """An exception as its class and, where it carries one, the errno's name: nothing it quotes."""
    errno_number = getattr(exc, "errno", None)
    cause = getattr(exc, "os_error", None)  # aiohttp's connector errors wrap the OSError
    if errno_number is None and cause is not None:
        errno_number = getattr(cause, "errno", None)
    name = errno.errorcode.get(errno_number) if isinstance(errno_number, int) else None
    return type(exc).__name__ + (f" ({name})" if name else "")


def classify_status(status_code: int) -> AttemptOutcome:
    """What a status says by itself, as any receiver's (kinds.base.standard_reading)."""
    return OUTCOME_OF[standard_reading(status=status_code, headers={}).verdict]


class WebhookTransport:
    """The HTTP transport (delivery.receivers.protocol.Transport): POSTs deliveries over keep-alive connections
    from one aiohttp session.

    The session's connector sets no limit of its own: how many requests are
    open is the worker's decision (delivery.rules.limit). Proxies come from the
    environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), read once and decided once
    per URL, rather than by aiohttp's trust_env, which looks them (and
    ~/.netrc) up again for every request in a thread pool: those threads take
    the GIL from the loop's thread, and every send waits for them. Open it and
    send from the event loop it is to run on.

    Direct requests resolve through a ScreeningResolver, so the addresses
    connected to are the ones checked. A request through a proxy connects to
    the proxy, which the operator named and which usually sits on a private
    network: it is not checked, and goes through a session of its own. What can
    be checked of the receiver behind it is, before the request is handed over:
    the scheme, a literal address, and a name as this host resolves it, refused
    when any of its addresses is (the proxy picks which to use). A name that
    resolves differently for the proxy, or changes in between, is out of the
    worker's sight: the proxy's own egress rules must refuse internal
    addresses (docs/operations.md, "Receivers behind us").

    `policy` defaults to the settings'; `resolver` (aiohttp's default, made on
    the loop, when None) is the one screened.
    """

    def __init__(
        self,
        *,
        timeout: float,
        policy: ReceiverPolicy | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.timeout = timeout
        self._policy = policy or ReceiverPolicy.from_settings()
        self._resolver = resolver
        self._screening: ScreeningResolver | None = None
        self._session: aiohttp.ClientSession | None = None
        self._proxied_session: aiohttp.ClientSession | None = None
        self._headers = {"User-Agent": USER_AGENT, "Content-Type": "application/json"}
        # getproxies() also carries NO_PROXY under "no": kept for the bypass check, never used as a proxy.
        self._proxies = urllib.request.getproxies()
        self._proxy_for: dict[str, str | None] = {}
        # Each endpoint's URL parsed once, not once per request.
        self._parsed: dict[str, yarl.URL] = {}
        # What the policy says of each URL before DNS (scheme, literal address): it cannot change.
        self._url_refusals: dict[str, str | None] = {}
        # Behind a proxy: each receiver name's verdict and until when (monotonic) it holds.
        self._proxied_verdicts: dict[tuple[str, int | None], tuple[float, str | None]] = {}

    def proxy_for(self, url: str) -> str | None:
        """The proxy the environment names for `url`, or None to go direct (cached per URL)."""
        if url not in self._proxy_for:
            parsed = urllib.parse.urlsplit(url)
            proxy = self._proxies.get(parsed.scheme or "http")
            # Public in urllib.request (urllib's own proxy_bypass uses it) but missing from typeshed.
            bypass = urllib.request.proxy_bypass_environment(parsed.hostname or "", self._proxies)  # type: ignore[attr-defined]
            self._proxy_for[url] = proxy if proxy and not bypass else None
        return self._proxy_for[url]

    def _url(self, url: str) -> yarl.URL:
        parsed = self._parsed.get(url)
        if parsed is None:
            parsed = self._parsed[url] = yarl.URL(url)
        return parsed

    @staticmethod
    @functools.cache
    def _timeout_of(seconds: float) -> aiohttp.ClientTimeout:
        # Deadlines per step, not one for the whole request: while the thread
        # waits out a database outage the loop does not run, and an answer
        # that arrived meanwhile must count as an answer when it resumes.
        # Arriving data cancels a read deadline; a total deadline would fire
        # first and have a delivered message sent again.
        return aiohttp.ClientTimeout(total=None, connect=seconds, sock_read=seconds)

    async def open(self) -> None:
        self._screening = ScreeningResolver(policy=self._policy, inner=self._resolver or DefaultResolver())
        self._session = self._new_session(resolver=self._screening)
        if any(self._proxies.get(scheme) for scheme in ("http", "https")):
            # Connects only to the proxies the environment names, resolved as they are.
            self._proxied_session = self._new_session(resolver=None)

    def _new_session(self, *, resolver: AbstractResolver | None) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=DNS_CACHE_SECONDS, resolver=resolver),
            timeout=self._timeout_of(self.timeout),
            trust_env=False,
            auto_decompress=False,
            # The receiver's cookies are never sent back: each message stands alone.
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=("Accept-Encoding",),
        )

    async def close(self) -> None:
        for session in (self._session, self._proxied_session):
            if session is not None:
                await session.close()
        self._session = self._proxied_session = None
        if self._screening is not None:
            await self._screening.close()  # a connector closes only the resolver it made itself
            self._screening = None

    def url_refusal(self, url: str) -> str | None:
        """Why the policy refuses `url` before any DNS (scheme, a literal address), or None (cached per URL)."""
        if url not in self._url_refusals:
            self._url_refusals[url] = url_refusal(url=url, policy=self._policy)
        return self._url_refusals[url]

    async def _proxied_refusal(self, url: str) -> str | None:
        """Behind a proxy: why the receiver's name is refused as this host resolves it, or None."""
        parsed = self._url(url)
        host = parsed.raw_host
        # url_refusal passed the URL, so it has a host; the transport is open, so it screens.
        assert host is not None and self._screening is not None
        if parse_address(host) is not None:
            return None  # a literal address: url_refusal has judged it
        key = (host, parsed.port)
        now_mono = time.monotonic()
        known = self._proxied_verdicts.get(key)
        if known is not None and known[0] > now_mono:
            return known[1]
        try:
            _, refused = await self._screening.screen(host, parsed.port or 0)
            verdict = refused[0].describe(host=host) if refused else None
        except (OSError, UnicodeError):
            verdict = None  # a name this host cannot resolve: the proxy resolves it, under its own rules
        self._proxied_verdicts[key] = (now_mono + DNS_CACHE_SECONDS, verdict)
        return verdict

    def headers_for(
        self, delivery: ClaimedDelivery, body: str, signer: WebhookSigner | None
    ) -> dict[str, str]:
        headers = {**self._headers, "X-Idempotency-Key": delivery.idempotency_key}
        if signer is not None:
            headers.update(
                signer.headers(msg_id=delivery.idempotency_key, body=body, sent_at=datetime.now(UTC))
            )
        return headers

    async def send(self, delivery: ClaimedDelivery, *, url: str, settings: LaneSettings) -> SendResult:
        """POST `delivery` to `url` as its destination's `settings` say: signed by their signer, waiting their
        timeout, the answer read by their kind. No error it returns repeats the URL's path or query (a token):
        only its redacted form."""
        timeout = settings.timeout
        started_at, started_mono = datetime.now(UTC), time.monotonic()
        try:
            refusal = self.url_refusal(url)
            proxy = None if refusal else self.proxy_for(url)
            if proxy is not None:
                refusal = await self._proxied_refusal(url)
            if refusal is None:
                session = self._session if proxy is None else self._proxied_session
                assert session is not None  # open() made both
                async with session.post(
                    self._url(url),
                    data=delivery.body.encode(),
                    headers=self.headers_for(delivery, delivery.body, settings.signer),
                    allow_redirects=False,
                    proxy=proxy,
                    timeout=self._timeout_of(timeout),
                ) as response:
                    excerpt = await _read_excerpt(response)
                    status, reason, headers = response.status, response.reason, response.headers
        except _SEND_ERRORS as exc:
            outcome, fields = _failure(exc, url=url, timeout=timeout)
        else:
            if refusal is not None:
                outcome, fields = (
                    AttemptOutcome.PERMANENT_FAILURE,
                    {
                        "error": refusal,
                        "refused": True,
                        "signal": Signal.NEUTRAL,
                    },
                )
            else:
                outcome, fields = _answered(settings.channel, status, reason, headers, excerpt)
        return SendResult(
            delivery=delivery,
            outcome=outcome,
            started_at=started_at,
            finished_at=datetime.now(UTC),
            duration_ms=int((time.monotonic() - started_mono) * 1000),
            started_mono=started_mono,
            **fields,
        )


# What a send turns into a failed attempt (_failure): whatever else it raises is a bug, and propagates.
_SEND_ERRORS = (AddressRefused, TimeoutError, aiohttp.InvalidURL, ValueError, aiohttp.ClientError, OSError)


def _failure(exc: Exception, *, url: str, timeout: float) -> tuple[AttemptOutcome, dict[str, Any]]:
    """A send's error (one of _SEND_ERRORS) as the attempt's outcome and SendResult's fields, in our words."""
    # No answer says anything of the receiver but that the way to it failed (Signal.FAILURE); a
    # request never made (a refused address, a URL that cannot be sent to) says nothing.
    if isinstance(exc, AddressRefused):
        return AttemptOutcome.PERMANENT_FAILURE, {
            "error": _scrubbed(str(exc), url),
            "refused": True,
            "signal": Signal.NEUTRAL,
        }
    if isinstance(exc, TimeoutError):
        return AttemptOutcome.TRANSIENT_FAILURE, {
            "error": f"Timed out after {timeout:g} s",
            "signal": Signal.FAILURE,
        }
    if isinstance(exc, (aiohttp.InvalidURL, ValueError)):
        return AttemptOutcome.PERMANENT_FAILURE, {
            "error": f"Request failed: {error_class(exc)}",
            "detail": f"Request failed: {_short(exc, url)}",
            "signal": Signal.NEUTRAL,
        }
    # Refused, reset, DNS, TLS, proxy, a connection closed mid-answer:
    # the receiver or the way to it, not the message. The text of a
    # malformed answer's error quotes the receiver's bytes: detail only.
    return AttemptOutcome.TRANSIENT_FAILURE, {
        "error": f"Connection error: {error_class(exc)}",
        "detail": f"Connection error: {_short(exc, url)}",
        "signal": Signal.FAILURE,
    }


def _answered(
    channel: Kind, status: int, reason: str | None, headers: Mapping[str, str], excerpt: str
) -> tuple[AttemptOutcome, dict[str, Any]]:
    """The receiver's answer as the attempt's outcome and SendResult's fields, read by the destination's kind.

    By position: one call per answer, and keywords cost more.
    """
    # The kind reads the answer: the status, its headers and the body's first bytes (a Slack
    # refusal is a code in the body, Discord's wait is in its JSON).
    reading = channel.read(status=status, headers=headers, body=excerpt)
    outcome = OUTCOME_OF[reading.verdict]
    delivered = outcome == AttemptOutcome.DELIVERED
    retry_after = reading.retry_after if reading.verdict == Verdict.RETRY else None
    gone = reading.verdict == Verdict.GONE
    return outcome, {
        "status_code": status,
        # Read here once for the lane, the record, the health and the retry decision.
        "signal": Signal.SUCCESS
        if delivered
        else signal_of(outcome=outcome, status_code=status, retry_after=retry_after, gone=gone),
        # The kind's code names a condition from its fixed list ("channel_not_found"), never a
        # person; the reason phrase is the receiver's to write ("Unavailable for Hey, Ada ..."),
        # so it goes to the attempt row's detail only.
        "error": "" if delivered else reading.code or _redirect_said(channel, status, headers),
        "detail": "" if delivered else (reason or ""),
        "response_excerpt": excerpt,
        "retry_after": retry_after,
        "gone": gone,
    }


def _redirect_said(channel: Kind, status: int, headers: Mapping[str, str]) -> str:
    """A redirect's Location as the destination's kind shows a URL of its own (never the part that may be a
    token): where it pointed, since it is never followed. "" for any other status."""
    if not 300 <= status < 400:
        return ""
    location = headers.get("Location")
    return f"Location {channel.shown_url(location)}" if location else "no Location"


async def _read_excerpt(response: aiohttp.ClientResponse) -> str:
    """The answer's first 2 KiB. Short bodies are read whole so the connection is kept for the next POST."""
    limit = DeliveryAttempt.RESPONSE_EXCERPT_BYTES
    try:
        if response.content_length is not None and response.content_length <= _READ_WHOLE_BODY_UP_TO:
            raw = await response.read()
        else:
            raw = await response.content.read(limit)
            response.close()  # the rest is never read: this connection is not reused
    except (aiohttp.ClientError, OSError) as exc:
        # Headers arrived but the body did not: the status still stands.
        return f"[body unreadable: {_short(exc)}]"
    return raw[:limit].decode("utf-8", errors="replace")


def _short(exc: Exception, url: str | None = None) -> str:
    text = str(exc) or type(exc).__name__
    if url is not None:
        text = _scrubbed(text, url)
    return text if len(text) <= 300 else text[:300] + "..."


def _scrubbed(text: str, url: str) -> str:
    """`text` (an exception's, which may quote the URL it failed on) with the URL's token-bearing parts shown
    redacted: the URL in any spelling aiohttp and yarl print it, then its path and query alone."""
    redacted = url_redact(url)
    spellings = {url, str(yarl.URL(url)), str(yarl.URL(url, encoded=True))}
    for spelling in sorted(spellings, key=len, reverse=True):
        text = text.replace(spelling, redacted)
    parsed = urllib.parse.urlsplit(url)
    for part in (parsed.path + ("?" + parsed.query if parsed.query else ""), parsed.query):
        if len(part) > 1:
            text = text.replace(part, "/…")
    return text
