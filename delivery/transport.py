"""The webhook transport: one POST, classified into delivered / transient / permanent."""

from __future__ import annotations

import email.utils
import json
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import urllib3
from standardwebhooks.webhooks import Webhook

from config import __version__
from delivery.models import AttemptOutcome, DeliveryAttempt

USER_AGENT = f"birthday-scheduler/{__version__} (+webhooks)"
# Statuses that say "try again later" rather than "never".
TRANSIENT_STATUSES = frozenset({408, 425, 429})
# Bodies up to this size are read whole so the connection can be reused;
# longer ones are cut after the excerpt and the connection dropped.
_READ_WHOLE_BODY_UP_TO = 64 * 1024


@dataclass(frozen=True)
class ClaimedDelivery:
    """What a worker needs to send one delivery, read while claiming it."""

    id: uuid.UUID
    event_id: uuid.UUID
    idempotency_key: str
    endpoint_url: str
    # The JSON body as stored (sent as it is: no decoding and encoding again).
    body: str
    attempt: int
    max_attempts: int

    @property
    def user_id(self) -> str | None:
        """For log lines only: read from the body, which names the recipient."""
        try:
            return json.loads(self.body).get("user_id")
        except (ValueError, AttributeError):
            return None


@dataclass
class SendResult:
    delivery: ClaimedDelivery
    outcome: AttemptOutcome
    started_at: datetime
    finished_at: datetime
    duration_ms: int
    status_code: int | None = None
    error: str = ""
    response_excerpt: str = ""
    retry_after: float | None = None

    def describe(self) -> str:
        if self.status_code is not None:
            return f"HTTP {self.status_code}" + (f" ({self.error})" if self.error else "")
        return self.error or "unknown error"


def classify_status(status_code: int) -> AttemptOutcome:
    if 200 <= status_code < 300:
        return AttemptOutcome.DELIVERED
    if status_code >= 500 or status_code in TRANSIENT_STATUSES:
        return AttemptOutcome.TRANSIENT_FAILURE
    # Redirects are not followed, and any other 4xx will not get better by itself.
    return AttemptOutcome.PERMANENT_FAILURE


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or HTTP-date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


class WebhookTransport:
    """POSTs deliveries over keep-alive connections: one urllib3 pool per receiver per thread.

    urllib3 is the HTTP client under requests; called directly it does the same
    keep-alive POST for about half the CPU (profiled: 82 % of a worker's time
    went to requests' Session machinery on top of urllib3 - preparing and
    merging settings, hooks, cookies - and a worker is CPU-bound). Proxies
    come from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), read once.
    """

    def __init__(self, *, timeout: float, secret: str = "") -> None:
        self.timeout = timeout
        self._timeout = urllib3.Timeout(connect=timeout, read=timeout)
        self._signer = Webhook(secret) if secret else None
        self._local = threading.local()
        # getproxies() also carries NO_PROXY under "no": kept for the bypass check
        # in _target, never used as a proxy itself.
        self._proxies = urllib.request.getproxies()
        self._headers = {"User-Agent": USER_AGENT, "Content-Type": "application/json"}

    def _target(self, url: str) -> tuple[urllib3.HTTPConnectionPool | urllib3.ProxyManager, str]:
        """The pool to POST `url` through, and the request target to give it (cached per thread)."""
        targets = getattr(self._local, "targets", None)
        if targets is None:
            targets = self._local.targets = {}
        target = targets.get(url)
        if target is None:
            parsed = urllib3.util.parse_url(url)
            proxy = self._proxies.get(parsed.scheme or "http")
            if proxy and not urllib.request.proxy_bypass_environment(parsed.host or "", self._proxies):
                target = (urllib3.ProxyManager(proxy, num_pools=4, maxsize=1), url)
            else:
                pool = urllib3.connection_from_url(url, maxsize=1, block=False)
                target = (pool, parsed.request_uri)
            targets[url] = target
        return target

    def headers_for(self, delivery: ClaimedDelivery, body: str) -> dict[str, str]:
        headers = {**self._headers, "X-Idempotency-Key": delivery.idempotency_key}
        if self._signer is not None:
            sent_at = datetime.now(UTC)
            headers["webhook-id"] = delivery.idempotency_key
            headers["webhook-timestamp"] = str(int(sent_at.timestamp()))
            headers["webhook-signature"] = self._signer.sign(delivery.idempotency_key, sent_at, body)
        return headers

    def send(self, delivery: ClaimedDelivery) -> SendResult:
        body = delivery.body
        started_at = datetime.now(UTC)
        started = time.perf_counter()

        def finish(outcome: AttemptOutcome, **fields) -> SendResult:
            elapsed = time.perf_counter() - started
            return SendResult(
                delivery=delivery,
                outcome=outcome,
                started_at=started_at,
                finished_at=datetime.now(UTC),
                duration_ms=int(elapsed * 1000),
                **fields,
            )

        try:
            pool, target = self._target(delivery.endpoint_url)
            response = pool.urlopen(
                "POST",
                target,
                body=body.encode(),
                headers=self.headers_for(delivery, body),
                timeout=self._timeout,
                retries=False,
                redirect=False,
                preload_content=False,
            )
        except urllib3.exceptions.NewConnectionError as exc:
            # Before TimeoutError: urllib3 makes it a subclass of ConnectTimeoutError.
            return finish(AttemptOutcome.TRANSIENT_FAILURE, error=f"Connection error: {_short(exc)}")
        except urllib3.exceptions.TimeoutError:
            return finish(AttemptOutcome.TRANSIENT_FAILURE, error=f"Timed out after {self.timeout:g} s")
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.SSLError, urllib3.exceptions.ProxyError) as exc:
            return finish(AttemptOutcome.TRANSIENT_FAILURE, error=f"Connection error: {_short(exc)}")
        except (urllib3.exceptions.HTTPError, ValueError) as exc:
            return finish(AttemptOutcome.PERMANENT_FAILURE, error=f"Request failed: {_short(exc)}")

        try:
            excerpt = self._read_excerpt(response)
        except urllib3.exceptions.HTTPError as exc:
            # Headers arrived but the body did not: the status still stands.
            excerpt = f"[body unreadable: {_short(exc)}]"
        outcome = classify_status(response.status)
        retry_after = None
        error = ""
        if outcome == AttemptOutcome.TRANSIENT_FAILURE:
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
        if outcome != AttemptOutcome.DELIVERED:
            error = response.reason or ""
        return finish(
            outcome,
            status_code=response.status,
            error=error,
            response_excerpt=excerpt,
            retry_after=retry_after,
        )

    @staticmethod
    def _read_excerpt(response: urllib3.BaseHTTPResponse) -> str:
        limit = DeliveryAttempt.RESPONSE_EXCERPT_BYTES
        try:
            length = int(response.headers.get("Content-Length", ""))
        except ValueError:
            length = None
        if length is not None and length <= _READ_WHOLE_BODY_UP_TO:
            # Read to the end so the connection goes back to the pool for the next POST.
            raw = response.read()
            response.release_conn()
        else:
            raw = response.read(limit)
            response.close()  # the rest is never read: this connection is not reused
            response.release_conn()
        return raw[:limit].decode("utf-8", errors="replace")


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "..."
