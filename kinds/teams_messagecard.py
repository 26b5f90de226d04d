"""The legacy Teams MessageCard, for an Office 365 connector webhook that still takes one; only if chosen.

Connectors are retired (Workflows replace them: kinds.teams); an operator
whose tenant still has one picks this format explicitly. A MessageCard's text
is rendered as markdown and a little HTML, so a name's markup is escaped: the
markdown characters with a backslash, `&`, `<`, `>` as HTML entities.

A connector's URL (`https://<tenant>.webhook.office.com/webhookb2/<guid>@<guid>/
IncomingWebhook/<id>/<guid>`) is a credential in every part of its path, so
where it is shown only its host is (Kind.shown_url's default).
"""

from __future__ import annotations

from collections.abc import Sequence

from kinds.base import LineKind, Mention, without_bidi_controls
from kinds.teams import BODY_MAX_BYTES, json_size

_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_MARKDOWN = frozenset("\\*_~`|#-[]()!")
# `summary` and `text` each carry the text: half the limit each, less the envelope.
_TEXT_BUDGET = BODY_MAX_BYTES // 2 - 512


def escape(text: str) -> list[str]:
    return [_HTML.get(ch) or ("\\" + ch if ch in _MARKDOWN else ch) for ch in without_bidi_controls(text)]


class TeamsMessageCard(LineKind):
    name = "teams_messagecard"
    label = "Microsoft Teams (legacy connector MessageCard)"
    pace = 4.0
    separator = "\n\n"
    budget = _TEXT_BUDGET
    escape = staticmethod(escape)
    size = staticmethod(json_size)

    # A connector card mentions nobody (mention_field stays ""): `mentioned` is always empty.
    def _compose(self, text: str, mentioned: Sequence[Mention]) -> dict:
        return {
            "@type": "MessageCard",
            "@context": "https://schema.org/extensions",
            # Shown in notifications and required when a card has no title.
            "summary": text,
            "text": text,
        }
