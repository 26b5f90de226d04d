"""What every kind of destination is: the small interface a module in `kinds/` implements.

A kind (standard JSON, Slack, Discord, Teams...) knows these things about its
service, and nothing about the outbox that sends to it:

- its transport (`transport`): the name of what carries its messages ("http":
  one POST per message, delivery.receivers.transport; "smtp": a mail relay's
  session, delivery.receivers.smtp, for kinds.email); the worker's sender
  speaks to every transport alike (delivery.receivers.protocol);
- its body for the standard payload (`body`), a JSON object stored with the
  delivery and handed to its transport as it is, escaping what came from data
  for its own format, and kept within the service's size limit by a cut that
  never breaks an escape (`fit`);
- its default pace (`pace`): the rate its service publishes, which the worker
  keeps to when the destination sets none;
- how to read its answers (`read`): what its transport got, for HTTP (status,
  headers, the body's first bytes), to a transport-neutral verdict (`Verdict`):
  delivered / retry (after the delay the service asked for) / refused for good /
  gone (the destination no longer exists, and only an operator can make it work
  again) / unknown (the message may or may not have been taken);
- its name and label, which are the destination's `format` and its display;
- which part of its address is the credential (`shown_url`): the destination's
  `url_display` is everything else, so two Slack or two Discord destinations
  can be told apart without their tokens being shown.

A digest (one destination's message naming a day's people: delivery.dispatch.digests)
is a second body, `digest_body`, from the standard digest payload (a heading and
one line per occurrence). The chat kinds build both from lines of text
(`_compose`), with the same escaping and cut; a digest whose lines do not fit
the service's limit keeps the heading and as many whole lines as fit, and says
how many more there are ("… and 4,200 more"): one message, never split, so a
digest stays one delivery under one key (docs/design.md, "Digests").

A chat kind may mention the person a message greets (`Mention`: their user id at
the service, and their name), given by the caller only where the destination
mentions and the person agreed: `body(payload, mention=…)`, and for a digest
`digest_body(payload, mentions={user_id: Mention})`. The kind names the
recipient's field that holds its service's id (`mention_field`: "" for a kind
that mentions nobody), renders the one markup that notifies exactly that person,
and at most once a message: a person with two lines in a digest is mentioned on
the first. Everything that came from data stays escaped as before, so a name
such as `<!channel>` still notifies nobody.

What adding a kind takes is in docs/design.md, "Adding a kind of destination".
This package imports no app: delivery (the outbox) imports it.
"""

from __future__ import annotations

import abc
import email.utils
import enum
import math
import re
import time
import urllib.parse
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import ClassVar, NamedTuple, TypeVar

ELLIPSIS = "…"
DEFAULT_PORTS = {"http": 80, "https": 443}
# The longest shown form of a URL: the `url_display` columns' max_length (delivery.models).
SHOWN_MAX = 300


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
    # The message may or may not have been taken: the connection was lost after it was sent and
    # before the receiver answered. Sent again under the same idempotency key.
    UNKNOWN = "unknown"


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
    return fit_counted(pieces, budget=budget, size=size, ellipsis=ellipsis)[0]


def fit_counted(
    pieces: Iterable[str], *, budget: int, size: Callable[[str], int] = len, ellipsis: str = ELLIPSIS
) -> tuple[str, int]:
    """`fit`'s text, and how many of the pieces it kept (a mention's tag is one piece: kept whole or not)."""
    pieces = list(pieces)
    sizes = [size(piece) for piece in pieces]
    if sum(sizes) <= budget:
        return "".join(pieces), len(pieces)
    room = budget - size(ellipsis)
    kept, used = [], 0
    for piece, piece_size in zip(pieces, sizes, strict=True):
        if used + piece_size > room:
            break
        kept.append(piece)
        used += piece_size
    return "".join(kept) + ellipsis, len(kept)


def utf16_length(text: str) -> int:
    """Length as JavaScript counts it (UTF-16 code units): never less than Python's count of code points."""
    return len(text.encode("utf-16-le")) // 2


# Formatting characters that can reorder what follows them (embeddings, overrides, isolates):
# a name holding U+202E would show the rest of the greeting backwards. Chat kinds drop them;
# the directional marks (U+200E, U+200F), which cannot reorder beyond their neighbours, stay.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def without_bidi_controls(text: str) -> str:
    return "".join(ch for ch in text if ch not in BIDI_CONTROLS)


def more_line(count: int, language: str = "en") -> str:
    """The last line of a digest cut short: how many occurrences it could not name, in the digest's
    language (en, de: its payload's `language`)."""
    if language == "de":
        return f"{ELLIPSIS} und {count:,} weitere".replace(",", ".")
    return f"{ELLIPSIS} and {count:,} more"


# The most people one message mentions: Discord takes at most 100 ids in `allowed_mentions.users`
# (and refuses the message with more), and no greeting needs more. The others are named, not mentioned.
MENTIONS_MAX = 100


@dataclass(frozen=True)
class Mention:
    """A person a chat message notifies: their user id at the destination's service, and their name."""

    user_id: str
    name: str


class Line(NamedTuple):
    """One line of a chat message: its text (from data, escaped by the kind) and whom it mentions."""

    text: str
    mention: Mention | None = None


def digest_lines(payload: Mapping, mentions: Mapping[str, Mention] | None) -> list[Line]:
    """A digest's heading and one line per occurrence, each person's first line with their mention.

    `mentions` by the occurrences' `user_id`: once per person (a birthday and an anniversary
    on one day are one mention), and no more than MENTIONS_MAX people.
    """
    lines = [Line(payload["heading"])]
    mentioned: set[str] = set()
    for occurrence in payload["occurrences"]:
        mention = (mentions or {}).get(occurrence.get("user_id", ""))
        if mention is not None and (mention.user_id in mentioned or len(mentioned) >= MENTIONS_MAX):
            mention = None
        if mention is not None:
            mentioned.add(mention.user_id)
        lines.append(Line(occurrence["line"], mention))
    return lines


def more_of(payload: Mapping) -> Callable[[int], Line]:
    """The "… and N more" line of the digest `payload`, in its language."""
    return lambda count: Line(more_line(count, payload.get("language", "en")))


_T = TypeVar("_T")


def summarised(
    lines: Sequence[_T], *, fits: Callable[[Sequence[_T]], bool], more: Callable[[int], _T]
) -> list[_T]:
    """`lines` (a heading, then one line per occurrence) if they fit; else the heading, as many of the
    occurrences' lines as fit beside the line `more` makes of how many are left out, and that line.

    How many to keep is found by doubling, then halving between the last two tries, so each trial
    measures at most about twice what is kept, never all 5,000 lines (bench: digests workload).
    """
    if fits(lines):
        return list(lines)
    total = len(lines) - 1

    def keeping(count: int) -> list[_T]:
        return [*lines[: 1 + count], more(total - count)]

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


def host_only(url: str) -> str:
    """What may be shown of any URL: its scheme, host and port (`https://host/…`), never a user, path or query.

    Spelt as delivery.credentials.receiver_urls.url_normalise spells them: scheme and host
    lower-cased, the scheme's default port left out. `…` alone for what is no URL.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        origin = _origin(parts)
    except ValueError:
        return ELLIPSIS
    return ELLIPSIS if origin is None else f"{origin}/{ELLIPSIS}"


def _origin(parts: urllib.parse.SplitResult) -> str | None:
    """`scheme://host[:port]` of `parts`, None without a scheme or host; ValueError for a bad port."""
    host = parts.hostname or ""
    port = parts.port
    if not host or not parts.scheme:
        return None
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    scheme = parts.scheme.lower()
    return f"{scheme}://{host}" + (
        f":{port}" if port is not None and port != DEFAULT_PORTS.get(scheme) else ""
    )


# What a shown query parameter's name and value may hold: nothing that a receiver could read as a
# second parameter (`;`, an unencoded `&`, `=` in a value) or that would hide one.
_PLAIN = re.compile(r"[A-Za-z0-9._~%+-]*")


def shown_by_shape(
    url: str,
    *,
    path: re.Pattern[str],
    public_query: Collection[str] = (),
    secret_query: Collection[str] = (),
) -> str:
    """`url` with its credential replaced by `…`, if it has the shape a kind expects; else `host_only(url)`.

    The shape is the path, matched whole by `path` (its group `secret`, if it has one, is the credential),
    and the query: each parameter named in `public_query` is shown as given, each in `secret_query` (every
    one of them present, with a value) has its value hidden, and any other makes the URL not of the shape.
    Scheme, host and port are shown as `host_only` shows them; the host is not part of the shape: it is
    shown anyway and holds no credential, and a relay or test receiver with the service's path and query
    holds its credential where the service does. A user name or password, a fragment (never sent), or a
    shown form longer than SHOWN_MAX: host only, so a part not proven free of the credential is never shown.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        origin = _origin(parts)
    except ValueError:
        return ELLIPSIS
    if origin is None:
        return ELLIPSIS
    fallback = f"{origin}/{ELLIPSIS}"
    if "@" in parts.netloc or parts.fragment:
        return fallback
    match = path.fullmatch(parts.path)
    if match is None:
        return fallback
    shown_path = parts.path
    if "secret" in path.groupindex:
        start, end = match.span("secret")
        if start == end:
            return fallback
        shown_path = shown_path[:start] + ELLIPSIS + shown_path[end:]
    query = _shown_query(parts.query, public=public_query, secret=secret_query)
    if query is None:
        return fallback
    shown = origin + shown_path + (f"?{query}" if query else "")
    return shown if len(shown) <= SHOWN_MAX else fallback


def _shown_query(query: str, *, public: Collection[str], secret: Collection[str]) -> str | None:
    """The query with the values of `secret` parameters hidden; None if it holds another parameter, or
    lacks one of `secret`."""
    if not query:
        return "" if not secret else None
    shown, hidden = [], set()
    for parameter in query.split("&"):
        name, equals, value = parameter.partition("=")
        if not _PLAIN.fullmatch(name):
            return None
        # As the receiver reads it: `%73ig` is `sig`.
        decoded = urllib.parse.unquote_plus(name)
        if decoded in secret and equals and value:
            shown.append(f"{name}={ELLIPSIS}")
            hidden.add(decoded)
        elif decoded in public and _PLAIN.fullmatch(value):
            shown.append(parameter)
        else:
            return None
    return "&".join(shown) if hidden == set(secret) else None


class Kind(abc.ABC):
    """A kind of destination. Subclasses set `name`, `label`, `pace` and implement `body`; `transport` defaults
    to HTTP, `read` to the standard reading of the status, `shown_url` to the host only."""

    # The destination's `format` value, and how the console and the API name it.
    name: ClassVar[str]
    label: ClassVar[str]
    # Whether its receiver verifies a signature (Standard Webhooks): only then is a destination of this
    # kind given a signing secret. A chat service checks none; its webhook URL is the credential.
    signed: ClassVar[bool] = False
    # What carries its messages, by name (delivery.receivers.transports.TRANSPORTS). `read` reads
    # that transport's answers: an HTTP status, its headers and the body's first bytes.
    transport: ClassVar[str] = "http"
    # The service's published pace per webhook in requests a second, kept to when the destination
    # sets no max_rate (and WEBHOOK_MAX_RATE sets no lower one); None: no pace of its own. A steady
    # rate: a burst the service would also allow is not used (a greeting can wait a second).
    pace: ClassVar[float | None] = None
    # The recipient's field holding their user id at this service, whom a message may mention
    # (users.fields); "": the kind mentions nobody, and a destination of it cannot be set to.
    mention_field: ClassVar[str] = ""

    @abc.abstractmethod
    def body(self, payload: Mapping, *, mention: Mention | None = None) -> dict:
        """The JSON body sent for the standard `payload` (delivery.dispatch.payload), whose `message` is the text;
        mentioning `mention`'s person, if given and the kind mentions."""

    @abc.abstractmethod
    def digest_body(self, payload: Mapping, *, mentions: Mapping[str, Mention] | None = None) -> dict:
        """The JSON body sent for a standard digest `payload` (delivery.dispatch.digests.digest_payload):
        its `heading`, then each of its `occurrences`' `line`; mentioning the people of `mentions`
        (by the occurrences' `user_id`) named, once each, if the kind mentions."""

    def read(self, *, status: int, headers: Mapping[str, str], body: str) -> Reading:
        """What the answer (`status`, `headers`, the first bytes of its `body`, decoded) means."""
        return standard_reading(status=status, headers=headers)

    def shown_url(self, url: str) -> str:
        """What may be shown of a receiver `url` of this kind (the destination's `url_display`): all but its
        credential. By default the host only: where a receiver keeps its secret cannot be known."""
        return host_only(url)

    def __repr__(self) -> str:
        return f"<channel {self.name}>"


class LineKind(Kind):
    """A chat kind whose body is lines of text, each escaped for its format and joined by `separator`.

    The message is one line; a digest is its heading and one line per occurrence, as many as fit
    `budget` (measured by `size`) with "… and N more" for the rest. A line that mentions someone
    starts with the kind's `mention_tag` (one piece, so a cut keeps it whole or drops it). Subclasses
    give `escape` and `_compose`, and a kind with a `mention_field` its `mention_tag`.
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

    def mention_tag(self, mention: Mention) -> str | None:
        """The markup that notifies `mention`'s person, or None for an id not of the service's shape."""
        return None

    @abc.abstractmethod
    def _compose(self, text: str, mentioned: Sequence[Mention]) -> dict:
        """The body carrying `text` (escaped and cut within `budget`), which mentions the people `mentioned`."""

    def body(self, payload: Mapping, *, mention: Mention | None = None) -> dict:
        return self._compose(*self._fitted([Line(payload["message"], mention)]))

    def digest_body(self, payload: Mapping, *, mentions: Mapping[str, Mention] | None = None) -> dict:
        lines = digest_lines(payload, mentions)
        return self._compose(*self._fitted(summarised(lines, fits=self._fits, more=more_of(payload))))

    def _tag(self, line: Line) -> str | None:
        if line.mention is None or not self.mention_field:
            return None
        return self.mention_tag(line.mention)

    def _pieces(self, lines: Sequence[Line]) -> tuple[list[str], dict[int, Mention]]:
        """The pieces of `lines`, and each mention by the index of its tag's piece."""
        pieces: list[str] = []
        tags: dict[int, Mention] = {}
        for number, line in enumerate(lines):
            if number:
                pieces.append(self.separator)
            tag = self._tag(line)
            if tag is not None and line.mention is not None:
                tags[len(pieces)] = line.mention
                pieces.append(tag + " ")
            pieces += self.escape(line.text)
        return pieces, tags

    def _fits(self, lines: Sequence[Line]) -> bool:
        return sum(map(self.size, self._pieces(lines)[0])) <= self.budget

    def _fitted(self, lines: Sequence[Line]) -> tuple[str, list[Mention]]:
        """`lines` joined and escaped, cut within `budget`, and the people whose tags it kept."""
        pieces, tags = self._pieces(lines)
        text, kept = fit_counted(pieces, budget=self.budget, size=self.size)
        return text, [mention for index, mention in tags.items() if index < kept]
