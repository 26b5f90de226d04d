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

A flow's webhook URL is `https://<host>/workflows/<id>/triggers/manual/paths/invoke`
(or, newer, `https://<environment>.environment.api.powerplatform.com/powerautomate/
automations/direct/workflows/<id>/triggers/manual/paths/invoke`) with the query
`api-version`, `sp` (the permission: `/triggers/manual/run`), `sv` and `sig`: the
signature `sig` is the credential (a shared access signature over the rest), and
only its value is hidden where the URL is shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from kinds.base import (
    Kind,
    Reading,
    Verdict,
    fit,
    shown_by_shape,
    standard_reading,
    summarised,
    without_bidi_controls,
)

# Teams' limit for a message, in bytes of the body; the margin covers the separators'
# spaces PostgreSQL's jsonb adds when the stored body is read back to be sent.
BODY_MAX_BYTES = 28_000
_MARGIN_BYTES = 256
ADAPTIVE_CARD = "application/vnd.microsoft.card.adaptive"
GONE_ERROR_CODES = frozenset({"WorkflowNotFound"})
# A flow's trigger, by its older (Logic Apps) or newer (Power Platform) path; its id and the trigger's name.
URL_PATH = re.compile(
    r"(?:/powerautomate/automations/direct)?/workflows/[0-9A-Za-z-]+/triggers/[A-Za-z0-9_-]+/paths/invoke"
)
URL_QUERY = frozenset({"api-version", "sp", "sv"})
URL_SECRET_QUERY = frozenset({"sig"})


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


class Teams(Kind):
    name = "teams"
    label = "Microsoft Teams (Workflows)"
    # About 4 requests a second per flow before 429s.
    pace = 4.0

    def shown_url(self, url: str) -> str:
        return shown_by_shape(url, path=URL_PATH, public_query=URL_QUERY, secret_query=URL_SECRET_QUERY)

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

    def digest_body(self, payload: Mapping) -> dict:
        # One block per line: the heading, then one per person, as Teams shows a list.
        lines = [payload["heading"], *(occurrence["line"] for occurrence in payload["occurrences"])]
        return self._card_of_lines(summarised(lines, fits=self._lines_fit))

    def _card_of_lines(self, lines: Sequence[str]) -> dict:
        return adaptive_card([_rich_text(without_bidi_controls(line)) for line in lines])

    def _lines_fit(self, lines: Sequence[str]) -> bool:
        size = len(json.dumps(self._card_of_lines(lines), ensure_ascii=False).encode())
        return size <= BODY_MAX_BYTES - _MARGIN_BYTES

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
