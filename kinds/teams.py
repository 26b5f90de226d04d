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
entry. A message is at most 28 KB.

The one mention it makes: the person greeted (their Teams user, `teams_user_id`:
a UPN or an Entra object id), given only where the destination mentions and the
person agreed. A TextBlock of its own holds `<at>Name</at>` and the card's
`msteams.entities` the one matching entry, `{"type": "mention", "text":
"<at>Name</at>", "mentioned": {"id": …, "name": "Name"}}`; the message stays in
its TextRun. The name between the tags is markup in a TextBlock, so it keeps only
letters, marks, digits, spaces and `'`, `-`, `.` of the person's name (`<at>` and
`</at>` in a name cannot close or open a mention; nor can `**` format); a name with
nothing left shows their UPN's local part, or `@`. A card
mentions each person once; a digest's lines each carry their person's block.

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
import unicodedata
from collections.abc import Mapping, Sequence

from kinds.base import (
    Kind,
    Line,
    Mention,
    Reading,
    Verdict,
    digest_lines,
    fit,
    more_of,
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
# A user principal name (no whitespace, no markup: users.validators) or an Entra object id (a GUID).
TEAMS_USER = re.compile(r"[A-Za-z0-9._%+'-]+@[A-Za-z0-9.-]+|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
# What of a name may stand between <at> and </at>: letters, marks and digits, and these.
_LABEL_PUNCTUATION = frozenset(" '-.")
# A name with nothing left of it is still mentioned: by its user's UPN's local part, else by this
# (no words: a label in one language would reach people of every other).
LABEL_FALLBACK = "@"
LABEL_MAX = 100


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


def _markup_free(text: str) -> str:
    kept = "".join(
        ch if ch in _LABEL_PUNCTUATION or unicodedata.category(ch)[0] in "LMN" else " "
        for ch in without_bidi_controls(text)
    )
    return " ".join(kept.split())[:LABEL_MAX].strip()


def mention_label(name: str, user_id: str = "") -> str:
    """The name as it may stand between <at> and </at>: markup-free, on one line, never empty."""
    upn_local_part = user_id.partition("@")[0] if "@" in user_id else ""
    return _markup_free(name) or _markup_free(upn_local_part) or LABEL_FALLBACK


def _label(mention: Mention) -> str:
    return mention_label(mention.name, mention.user_id)


def _at(mention: Mention) -> str:
    return f"<at>{_label(mention)}</at>"


def _mention_block(mention: Mention) -> dict:
    return {"type": "TextBlock", "text": _at(mention), "wrap": True}


def _entity(mention: Mention) -> dict:
    return {
        "type": "mention",
        "text": _at(mention),
        "mentioned": {"id": mention.user_id, "name": _label(mention)},
    }


def with_mentions(card: dict, mentioned: Sequence[Mention]) -> dict:
    """`card` with an `msteams.entities` entry for each of `mentioned` (none: the card as it was)."""
    if mentioned:
        card["attachments"][0]["content"]["msteams"] = {"entities": [_entity(m) for m in mentioned]}
    return card


class Teams(Kind):
    name = "teams"
    label = "Microsoft Teams (Workflows)"
    # About 4 requests a second per flow before 429s.
    pace = 4.0

    def shown_url(self, url: str) -> str:
        return shown_by_shape(url, path=URL_PATH, public_query=URL_QUERY, secret_query=URL_SECRET_QUERY)

    mention_field = "teams_user_id"

    def _mentioned(self, line: Line) -> Mention | None:
        mention = line.mention
        return mention if mention is not None and TEAMS_USER.fullmatch(mention.user_id) else None

    def body(self, payload: Mapping, *, mention: Mention | None = None) -> dict:
        line = Line(payload["message"], mention)
        mentioned = self._mentioned(line)
        pieces = text_pieces(line.text)
        head = [_mention_block(mentioned)] if mentioned else []
        envelope = with_mentions(adaptive_card([*head, _rich_text("")]), [mentioned] if mentioned else [])
        text = within_body_limit(envelope, pieces)
        return with_mentions(adaptive_card([*head, _rich_text(text)]), [mentioned] if mentioned else [])

    def digest_body(self, payload: Mapping, *, mentions: Mapping[str, Mention] | None = None) -> dict:
        # One block per line: the heading, then one per person (after their mention's), as Teams shows a list.
        lines = digest_lines(payload, mentions)
        return self._card_of_lines(summarised(lines, fits=self._lines_fit, more=more_of(payload)))

    def _card_of_lines(self, lines: Sequence[Line]) -> dict:
        blocks: list[dict] = []
        mentioned: list[Mention] = []
        for line in lines:
            mention = self._mentioned(line)
            if mention is not None:
                blocks.append(_mention_block(mention))
                mentioned.append(mention)
            blocks.append(_rich_text(without_bidi_controls(line.text)))
        return with_mentions(adaptive_card(blocks), mentioned)

    def _lines_fit(self, lines: Sequence[Line]) -> bool:
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
