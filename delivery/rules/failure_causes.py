"""Why a delivery failed, as one short cause: its HTTP status, or the class of error when there was none.

Operators triage failures by cause (Hookdeck's "issues", Sidekiq's dead set by
error class): a destination answering 400 to everything is one problem however
many deliveries it killed. The cause is read from what a delivery records of its
last attempt (`last_status_code`, the start of `last_error`), by the SQL below
when grouping thousands of rows, and by cause_of() for one row; both are the
same table, and a test holds them to it. The receiver's own words (its answer's
body) are never part of a cause: they stay on the attempt rows.
"""

from __future__ import annotations

import re
from http import HTTPStatus

from kinds.base import TRANSIENT_STATUSES

# (cause key, how last_error starts, in words). Checked in this order, before the status code
# for TOO_LATE: a delivery given up for lateness keeps the status of its last try, but it
# died of waiting, not of that answer.
TOO_LATE = "too_late"
ERROR_CLASSES: tuple[tuple[str, str, str], ...] = (
    (
        TOO_LATE,
        "Not delivered within EVENT_MAX_LATENESS",
        "Given up: still not delivered EVENT_MAX_LATENESS after it was queued",
    ),
)
# Checked after the status code (these errors come without one).
NO_ANSWER_CLASSES: tuple[tuple[str, str, str], ...] = (
    ("timeout", "Timed out", "Timed out: the receiver did not answer in time"),
    ("connection", "Connection error", "Could not connect to the receiver (refused, reset, DNS or TLS)"),
    (
        "address_refused",
        "Refused:",
        "Not sent: the receiver's address is not allowed (private, loopback or metadata)",
    ),
    ("bad_request", "Request failed", "Not sent: the request could not be made (the URL is invalid)"),
    # A mail relay's answers (delivery.receivers.smtp): a reply code at a step of the session.
    (
        "outcome_unknown",
        "Outcome unknown",
        "Outcome unknown: the connection was lost after the message was sent, before the relay's reply",
    ),
    (
        "smtp_refused",
        "SMTP 5",
        "Refused by the mail relay (a 5xx reply: the address, our login or the message)",
    ),
    ("smtp_deferred", "SMTP 4", "Deferred by the mail relay (a 4xx reply: greylisting, a full queue)"),
)
OTHER = "other"
_HTTP_DESCRIPTION = re.compile(r"^HTTP (\d{3})\b")
HTTP_PREFIX = "http_"


def http_cause(status_code: int) -> str:
    return f"{HTTP_PREFIX}{status_code}"


def cause_of(*, status_code: int | None, error: str) -> str:
    """The cause key of one failed delivery or attempt (the same rule as CAUSE_SQL)."""
    for key, prefix, _ in ERROR_CLASSES:
        if error.startswith(prefix):
            return key
    if status_code is not None:
        return http_cause(status_code)
    for key, prefix, _ in NO_ANSWER_CLASSES:
        if error.startswith(prefix):
            return key
    return OTHER


def description_label(description: str) -> str:
    """An attempt's one-line description ("HTTP 503 (Service Unavailable)", "Timed out after 10 s") in words."""
    match = _HTTP_DESCRIPTION.match(description)
    if match:
        return cause_label(http_cause(int(match.group(1))))
    return cause_label(cause_of(status_code=None, error=description))


def cause_label(cause: str) -> str:
    """A cause in words: 'HTTP 400 Bad Request', 'Timed out: the receiver did not answer in time'."""
    if cause.startswith(HTTP_PREFIX):
        code = cause.removeprefix(HTTP_PREFIX)
        try:
            return f"HTTP {code} {HTTPStatus(int(code)).phrase}"
        except ValueError:
            return f"HTTP {code}"
    for key, _, words in (*ERROR_CLASSES, *NO_ANSWER_CLASSES):
        if key == cause:
            return words
    return "Failed for another reason (see the delivery's attempts)"


def cause_hint(cause: str, *, chat: bool = False) -> str:
    """What a cause means and what fixes it, in one line (`chat`: the destination is a Slack, Discord or Teams
    webhook, whose service answers 404 when the webhook was deleted)."""
    if cause.startswith(HTTP_PREFIX):
        return _status_hint(int(cause.removeprefix(HTTP_PREFIX)), chat=chat)
    return _CLASS_HINTS.get(cause, _CLASS_HINTS[OTHER])


_CLASS_HINTS = {
    TOO_LATE: "It waited longer than EVENT_MAX_LATENESS to be delivered, so it was given up rather than sent late. "
    "Fix the receiver, then Resend it if the greeting is still welcome.",
    "timeout": "The receiver took longer than the destination's timeout to answer. Raise the timeout (up to "
    "WEBHOOK_TIMEOUT) or ask the receiver's owner why it is slow; it is retried meanwhile.",
    "connection": "Nothing answered at the URL's host and port (refused, reset, DNS or TLS). Check the host name, "
    "its certificate and that the receiver is up; it is retried meanwhile.",
    "address_refused": "The URL leads to a private, loopback or metadata address, where greetings are never sent. "
    "Use the receiver's public URL, or allow its network in WEBHOOK_ALLOWED_NETWORKS.",
    "bad_request": "The URL could not be used to make a request. Correct it in the destination's settings.",
    OTHER: "See the delivery's attempts for what happened; Resend once it is fixed.",
}


def _status_hint(status: int, *, chat: bool) -> str:
    if 300 <= status < 400:
        return (
            "The receiver answered with a redirect to the Location shown. Redirects are never followed (a "
            "greeting goes only where an operator sent it): if the receiver moved, give the destination the "
            "new URL, then Resend."
        )
    if status in (404, 410) and chat:
        return (
            "The chat service says the webhook no longer exists: it was deleted, or its channel archived. "
            "Make a new incoming webhook, give the destination its URL, and Resume the endpoint."
        )
    if status in (404, 410):
        return "Nothing takes greetings at this URL. Check its path, or give the destination the receiver's new URL."
    if status in (401, 403):
        return (
            "The receiver refused the request's credentials. Check the signing secret it verifies with (rotate "
            "it and copy the new one to the receiver) or the token in the URL."
        )
    if status == 413:
        return "The message is larger than the receiver accepts. Shorten the destination's own text, or the digest."
    if status in TRANSIENT_STATUSES or status >= 500:
        return (
            "The receiver is down, slow or throttling. It is retried with backoff (a 429 costs no attempt); if "
            "it lasts, ask its owner, or lower the destination's max rate."
        )
    return (
        "The receiver refused the message itself; its answer, on the attempt, says why. Fix what it objects "
        "to (the destination's format or text), then Resend."
    )


def is_cause(value: str) -> bool:
    """Whether `value` is a cause key this code can produce (what an acknowledgement may name)."""
    if value.startswith(HTTP_PREFIX):
        code = value.removeprefix(HTTP_PREFIX)
        return code.isdigit() and 100 <= int(code) <= 599
    return value == OTHER or any(value == key for key, _, _ in (*ERROR_CLASSES, *NO_ANSWER_CLASSES))


def _like(prefix: str) -> str:
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_").replace("'", "''")
    return f"'{escaped}%%'"


def _cause_sql(*, status: str, error: str) -> str:
    """cause_of() as an SQL expression over the columns named (the constants above are code, not input)."""
    arms = [f"WHEN {error} LIKE {_like(prefix)} THEN '{key}'" for key, prefix, _ in ERROR_CLASSES]
    arms.append(f"WHEN {status} IS NOT NULL THEN '{HTTP_PREFIX}' || {status}::text")
    arms += [f"WHEN {error} LIKE {_like(prefix)} THEN '{key}'" for key, prefix, _ in NO_ANSWER_CLASSES]
    return "CASE " + " ".join(arms) + f" ELSE '{OTHER}' END"


def cause_sql(*, alias: str = "") -> str:
    """CAUSE_SQL over the delivery table named `alias` in the query ("" : unqualified)."""
    prefix = f"{alias}." if alias else ""
    return _cause_sql(status=f"{prefix}last_status_code", error=f"{prefix}last_error")


# Over delivery_delivery's columns; `%%` because it goes into a query with parameters.
CAUSE_SQL = cause_sql()
