"""Email: a greeting as a mail message (subject, text, HTML), carried over SMTP to the destination's relay.

The body stored with the delivery is a JSON object of what the message says
(`subject`, `text`, `html`) and to whom (`to`: the recipient's own address for a
personal destination, empty for one sent to the destination's fixed addresses;
whom it greets, `user_id`, for the one-click unsubscribe URL of that person and
destination, which the transport puts in List-Unsubscribe). The transport
(delivery.receivers.smtp) turns it into a MIME message with the relay's From,
Reply-To and the headers every message carries.

Text from data is made safe here, for each part it lands in: a subject keeps no
control character (a CR or LF would end the header; a NUL is refused by relays)
and no bidi control that could reorder it; the HTML part is escaped. The
transport's `email.message.EmailMessage` encodes what is not ASCII (RFC 2047).

Answers are SMTP replies at a step of the session (`read_smtp`), not HTTP
statuses: `read` is never called for this kind.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping

from kinds.base import BIDI_CONTROLS, Kind, Mention, Reading, Verdict, digest_lines, host_only

# A subject longer than this is cut: RFC 5322 asks for lines of at most 998 characters, and a
# subject much over 200 is cut by every mail client anyway.
SUBJECT_MAX = 200
# Characters that end or corrupt a header, or reorder what follows them: replaced by a space.
_UNSAFE = re.compile("[\x00-\x1f\x7f\u0085\u2028\u2029" + "".join(sorted(BIDI_CONTROLS)) + "]")
# The steps of an SMTP session a reply can come at (delivery.receivers.smtp).
CONNECT, EHLO, STARTTLS, AUTH, MAIL, RCPT, DATA = (
    "connect",
    "ehlo",
    "starttls",
    "auth",
    "mail",
    "rcpt",
    "data",
)
# Steps at which a refusal is the relay's or our account's, not one message's.
RELAY_STEPS = frozenset({CONNECT, EHLO, STARTTLS, AUTH, MAIL})


def header_safe(text: str, *, limit: int = SUBJECT_MAX) -> str:
    """`text` as one header line: controls and bidi overrides made spaces, runs of spaces one, cut at `limit`."""
    cleaned = " ".join(_UNSAFE.sub(" ", text).split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def text_safe(text: str) -> str:
    """A text part: NUL and the other controls but newline and tab removed (line breaks kept)."""
    return re.sub("[\x00-\x08\x0b-\x1f\x7f]", "", text.replace("\r\n", "\n").replace("\r", "\n"))


def html_of(text: str) -> str:
    """The text part as a minimal HTML document, every character from data escaped."""
    paragraphs = "".join(f"<p>{html.escape(line)}</p>" for line in text.split("\n") if line.strip())
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head>'
        f'<body style="font-family:sans-serif;font-size:16px;line-height:1.5">{paragraphs}</body></html>'
    )


class Email(Kind):
    name = "email"
    label = "Email (SMTP)"
    transport = "smtp"

    # It mentions nobody: a mail is addressed, not a mention.
    def body(self, payload: Mapping, *, mention: Mention | None = None) -> dict:
        text = text_safe(payload["message"])
        return {
            "subject": header_safe(payload.get("subject") or payload["message"]),
            "text": text,
            "html": html_of(text),
            "to": payload.get("email", ""),
            # Whom it greets: the erasure and the log lines find it by these (a test message has none).
            "user_id": payload.get("user_id"),
            "event_id": payload.get("event_id"),
            "event_type": payload.get("event_type", ""),
            # The test message (delivery.actions.ping): to the fixed addresses, else to Reply-To or From.
            "test": bool(payload.get("test")),
        }

    def digest_body(self, payload: Mapping, *, mentions: Mapping[str, Mention] | None = None) -> dict:
        # Every line, however many: a mailbox has no service limit to fit.
        lines = [text_safe(line.text) for line in digest_lines(payload, None)]
        text = "\n".join(lines)
        return {
            "subject": header_safe(lines[0]),
            "text": text,
            "html": html_of(text),
            "to": "",
        }

    def read_smtp(self, *, step: str, code: int | None) -> Reading:
        """What an SMTP reply `code` at `step` of the session means for the message (None: no reply came).

        2xx: delivered. 4xx: not now (greylisting, a full queue). 5xx at RCPT: this address, for
        good. 5xx elsewhere: refused (the relay refuses us or the message). No reply after DATA's
        final dot: unknown. No reply before it: the relay is unreachable, retried.
        """
        if code is None:
            return Reading(Verdict.UNKNOWN) if step == DATA else Reading(Verdict.RETRY)
        if 200 <= code < 400:
            return Reading(Verdict.DELIVERED)
        if 400 <= code < 500:
            return Reading(Verdict.RETRY)
        if step == RCPT:
            return Reading(Verdict.REFUSED, code="address_refused")
        return Reading(Verdict.REFUSED, code=f"smtp_{code}_at_{step}")

    def shown_url(self, url: str) -> str:
        # The relay's scheme, host and port: its password is a column of its own, never in the URL.
        return host_only(url)
