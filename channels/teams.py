"""Microsoft Teams through a Workflows (Power Automate) webhook: an Adaptive Card in `attachments`.

Office 365 connector webhooks and their MessageCard are retired. What remains
is a Workflows webhook (a flow whose trigger is "When a Teams webhook request
is received"), whose "post card in a chat or channel" template reads
`attachments` and posts each Adaptive Card in it: without that wrapper (a
`type: message` body whose attachments have the Adaptive Card content type
and an `AdaptiveCard` content) the flow fails, after its webhook has already
answered 202. The 202 means "accepted by the flow", never "posted":
docs/operations.md says what a flow's owner sets up and where its failures show.

The text goes in a RichTextBlock's TextRun, which Adaptive Cards render as it
is ("Markdown is not supported" in a TextRun): a name's `**`, `_` or
`[label](url)` shows as typed, on every Teams client alike, where escaping
markdown in a TextBlock is read differently by the desktop and mobile
clients. Nothing in a card mentions anyone without an `msteams.entities`
entry, which a body never has. A message is at most 28 KB.

More than about 4 requests a second to one flow are refused with 429 (and a
Retry-After). A deleted flow answers 404 with the error code `WorkflowNotFound`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from channels.base import Channel, Reading, Verdict, fit, standard_reading, without_bidi_controls

# Teams' limit for a message, in bytes of the body; the margin covers the separators'
# spaces PostgreSQL's jsonb adds when the stored body is read back to be sent.
BODY_MAX_BYTES = 28_000
_MARGIN_BYTES = 256
ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
GONE_ERROR_CODES = frozenset({"WorkflowNotFound"})


def json_size(text: str) -> int:
    """Bytes `text` takes inside a JSON string (UTF-8, escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def text_pieces(text: str) -> list[str]:
    return list(without_bidi_controls(text))


def within_body_limit(envelope: dict, pieces: list[str]) -> str:
    """The text the pieces make, cut so that `envelope` with it stays within BODY_MAX_BYTES."""
    budget = BODY_MAX_BYTES - _MARGIN_BYTES - len(json.dumps(envelope, ensure_ascii=False).encode())
    return fit(pieces, budget=budget, size=json_size)


def adaptive_card(blocks: list[dict]) -> dict:
    """The Workflows body: one Adaptive Card holding `blocks`."""
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": ADAPTIVE_CARD,
                "contentUrl": None,
                "content": {
                    "type": "AdaptiveCard",
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "version": "1.4",
                    "body": blocks,
                },
            }
        ],
    }


def _rich_text(text: str) -> dict:
    return {"type": "RichTextBlock", "inlines": [{"type": "TextRun", "text": text}]}


class Teams(Channel):
    name = "teams"
    label = "Microsoft Teams (Workflows)"
    # About 4 requests a second per flow before 429s.
    pace = 4.0

    def body(self, payload: Mapping) -> dict:
        return self._compose([payload["message"]])

    def _compose(self, lines: Sequence[str]) -> dict:
        pieces = [
            piece
            for number, line in enumerate(lines)
            for piece in ((["\n"] if number else []) + text_pieces(line))
        ]
        text = within_body_limit(adaptive_card([_rich_text("")]), pieces)
        return adaptive_card([_rich_text(text)])

    def read(self, *, status: int, headers: Mapping[str, str], body: str) -> Reading:
        if status == 404:
            try:
                error = json.loads(body).get("error")
            except (ValueError, AttributeError):
                error = None
            code = error.get("code") if isinstance(error, dict) else None
            if code in GONE_ERROR_CODES:
                return Reading(Verdict.GONE, code=code)
        return standard_reading(status=status, headers=headers)
