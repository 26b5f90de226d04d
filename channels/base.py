"""What every kind of destination is: the small interface a module in `channels/` implements.

A kind (standard JSON, Slack, Discord, Teams...) knows four things about its
service, and nothing about the outbox that sends to it:

- its body for the standard payload (`body`), escaping what came from data for
  its own format, and kept within the service's size limit by a cut that never
  breaks an escape (`fit`);
- its default pace (`pace`): the rate its service publishes, which the worker
  keeps to when the destination sets none;
- how to read its answers (`read`): (status, headers, the body's first bytes)
  to a verdict, delivered / retry (after the delay the service asked for) /
  refused for good / gone (the destination no longer exists, and only an
  operator can make it work again);
- its name and label, which are the destination's `format` and its display.

A digest (one destination's message naming a day's people: delivery.services.digests)
is a second body, `digest_body`, from the standard digest payload (a heading and
one line per occurrence). The chat kinds build both from lines of text
(`_compose`), with the same escaping and cut; a digest whose lines do not fit
the service's limit keeps the heading and as many whole lines as fit, and says
how many more there are ("… and 4,200 more"): one message, never split, so a
digest stays one delivery under one key (docs/design.md, "Digests").

This package imports no app: delivery (the outbox) imports it.
"""

from __future__ import annotations

import abc
import email.utils
import enum
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import ClassVar

ELLIPSIS = "…"


class Verdict(enum.StrEnum):
    """What an answer means for the message and its destination."""

    # Taken (2xx).
    DELIVERED = "delivered"
    # Not now: the service is down, slow or throttling (5xx, 408, 425, 429), to be tried again.
    RETRY = "retry"
    # Never as it is: the message or the request (other 4xx, a redirect).
    REFUSED = "refused"
    # The destination no longer exists (a deleted webhook, an archived channel): nothing
    # sent to it can be taken until an operator fixes it.
    GONE = "gone"


@dataclass(frozen=True)
class Reading:
    """A kind's reading of one answer."""

    verdict: Verdict
    # RETRY: seconds the service asked to wait (a Retry-After header, Discord's JSON
    # `retry_after`); None when it said nothing.
    retry_after: float | None = None
    # The service's own code for a GONE or REFUSED answer ("channel_not_found"), from the kind's
    # fixed list: it names a condition, never a person, so it may be stored and logged.
    code: str = ""


# Statuses that say "try again later" rather than "never".
TRANSIENT_STATUSES = frozenset({408, 425, 429})


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


def seconds_or_none(value: object) -> float | None:
    """A duration a service wrote in JSON, if it is a finite non-negative number of seconds (else None)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


# The readings that carry nothing but their verdict, made once: every delivered answer is read.
_DELIVERED = Reading(Verdict.DELIVERED)
_REFUSED = Reading(Verdict.REFUSED)


def standard_reading(*, status: int, headers: Mapping[str, str]) -> Reading:
    """What an HTTP status says by itself, with the Retry-After of a transient one: any receiver's reading."""
    if 200 <= status < 300:
        return _DELIVERED
    if status >= 500 or status in TRANSIENT_STATUSES:
        return Reading(Verdict.RETRY, retry_after=parse_retry_after(headers.get("Retry-After")))
    # Redirects are not followed, and any other 4xx will not get better by itself.
    return _REFUSED


def fit(
    pieces: Iterable[str], *, budget: int, size: Callable[[str], int] = len, ellipsis: str = ELLIPSIS
) -> str:
    """The pieces joined, as many as fit in `budget` (measured by `size`); cut, they end with `ellipsis`.

    Each piece is one source character already escaped for the format, so a cut
    falls between escapes and never inside one (`&lt;` is kept whole or not at all).
    """
    pieces = list(pieces)
    sizes = [size(piece) for piece in pieces]
    if sum(sizes) <= budget:
        return "".join(pieces)
    room = budget - size(ellipsis)
    kept, used = [], 0
    for piece, piece_size in zip(pieces, sizes, strict=True):
        if used + piece_size > room:
            break
        kept.append(piece)
        used += piece_size
    return "".join(kept) + ellipsis


def utf16_length(text: str) -> int:
    """Length as JavaScript counts it (UTF-16 code units): never less than Python's count of code points."""
    return len(text.encode("utf-16-le")) // 2


# Formatting characters that can reorder what follows them (embeddings, overrides, isolates):
# a name holding U+202E would show the rest of the greeting backwards. Chat kinds drop them;
# the directional marks (U+200E, U+200F), which cannot reorder beyond their neighbours, stay.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def without_bidi_controls(text: str) -> str:
    return "".join(ch for ch in text if ch not in BIDI_CONTROLS)


def more_line(count: int) -> str:
    """The last line of a digest cut short: how many occurrences it could not name."""
    return f"{ELLIPSIS} and {count:,} more"


def summarised(lines: Sequence[str], *, fits: Callable[[Sequence[str]], bool]) -> list[str]:
    """`lines` (a heading, then one line per occurrence) if they fit; else the heading, as many of the
    occurrences' lines as fit beside a `more_line` naming how many are left out, and that line.

    How many to keep is found by doubling, then halving between the last two tries, so each trial
    measures at most about twice what is kept, never all 5,000 lines (bench: digests workload).
    """
    if fits(lines):
        return list(lines)
    total = len(lines) - 1

    def keeping(count: int) -> list[str]:
        return [*lines[: 1 + count], more_line(total - count)]

    low, high = 0, 1
    while high < total and fits(keeping(high)):
        low, high = high, min(high * 2, total)
    # fits(keeping(low)) holds (or low is 0); keeping(high) does not fit, or high is every line, which did not.
    high -= 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(keeping(middle)):
            low = middle
        else:
            high = middle - 1
    return keeping(low)


class Channel(abc.ABC):
    """A kind of destination. Subclasses set `name`, `label`, `pace` and implement `body`; `read` defaults to
    the standard reading of the status."""

    # The destination's `format` value, and how the console and the API name it.
    name: ClassVar[str]
    label: ClassVar[str]
    # The service's published pace per webhook in requests a second, kept to when the destination
    # sets no max_rate (and WEBHOOK_MAX_RATE sets no lower one); None: no pace of its own. A steady
    # rate: a burst the service would also allow is not used (a greeting can wait a second).
    pace: ClassVar[float | None] = None

    @abc.abstractmethod
    def body(self, payload: Mapping) -> dict:
        """The JSON body sent for the standard `payload` (delivery.payload), whose `message` is the text."""

    @abc.abstractmethod
    def digest_body(self, payload: Mapping) -> dict:
        """The JSON body sent for a standard digest `payload` (delivery.services.digests.digest_payload):
        its `heading`, then each of its `occurrences`' `line`."""

    def read(self, *, status: int, headers: Mapping[str, str], body: str) -> Reading:
        """What the answer (`status`, `headers`, the first bytes of its `body`, decoded) means."""
        return standard_reading(status=status, headers=headers)

    def __repr__(self) -> str:
        return f"<channel {self.name}>"


class LineChannel(Channel):
    """A chat kind whose body is lines of text, each escaped for its format and joined by `separator`.

    The message is one line; a digest is its heading and one line per occurrence, as many as fit
    `budget` (measured by `size`) with "… and N more" for the rest. Subclasses give `escape` and `_compose`.
    """

    separator: ClassVar[str] = "\n"
    budget: ClassVar[int]

    @staticmethod
    @abc.abstractmethod
    def escape(text: str) -> list[str]:
        """The text as pieces escaped for the format, one source character each (see `fit`)."""

    @staticmethod
    def size(text: str) -> int:
        return len(text)

    @abc.abstractmethod
    def _compose(self, lines: Sequence[str]) -> dict:
        """The body carrying `lines`, cut within `budget`."""

    def body(self, payload: Mapping) -> dict:
        return self._compose([payload["message"]])

    def digest_body(self, payload: Mapping) -> dict:
        lines = [payload["heading"], *(occurrence["line"] for occurrence in payload["occurrences"])]
        return self._compose(summarised(lines, fits=self._fits))

    def _pieces(self, lines: Sequence[str]) -> list[str]:
        return [
            piece
            for number, line in enumerate(lines)
            for piece in (([self.separator] if number else []) + self.escape(line))
        ]

    def _fits(self, lines: Sequence[str]) -> bool:
        return sum(map(self.size, self._pieces(lines))) <= self.budget
