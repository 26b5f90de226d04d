"""Slack incoming webhooks: `{"text": ...}` with its control characters escaped, at Slack's pace.

In a Slack message `&`, `<` and `>` are control characters: `<!channel>`,
`<!here>` and `<!everyone>` notify a whole channel, `<@U024BE7LH>` mentions a
person, `<https://x|label>` is a link with a label of the sender's choosing.
Escaped as `&amp;`, `&lt;` and `&gt;` they are plain text again (Slack's
"Formatting text for app surfaces", escaping). `mrkdwn: false` turns off the
bold, italic, strike, code and quote markup a name could carry, and the
unfurl flags keep a URL written in a name from pulling a preview into the
channel. Plain `@channel` is no mention in a webhook's text (no `link_names`).

The one mention it makes: `<@U…>` for the person greeted (their Slack member id,
`slack_user_id`: U or W then capital letters and digits), given only where the
destination mentions and the person agreed; `mrkdwn: false` leaves such a
sequence working, as it leaves `<!channel>` (why a name's `<` is escaped).

Slack answers `200 ok`. Its refusals are a short code in the body: those of
`GONE_CODES` mean the webhook or its channel no longer takes messages and
only a person can fix that (a new webhook, an unarchived channel).

An incoming webhook's URL is `https://hooks.slack.com/services/T…/B…/<token>`:
the workspace (T…) and the webhook (B…) are ids, the last segment is the token,
and only it is hidden where the URL is shown.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from kinds.base import (
    LineKind,
    Mention,
    Reading,
    Verdict,
    shown_by_shape,
    standard_reading,
    without_bidi_controls,
)

# Slack's guidance for `text`: at most 4,000 characters (longer text is cut or split by Slack).
TEXT_MAX = 4000
_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
# The webhook, its channel or its workspace is gone or closed to it: retrying cannot help.
GONE_CODES = frozenset(
    {
        "channel_not_found",
        "channel_is_archived",
        "action_prohibited",
        "no_service",
        "no_team",
        "invalid_token",
        "no_active_hooks",
        "posting_to_general_channel_denied",
    }
)
# Slack's codes for a message it will never take: our bug, kept for the record.
REFUSED_CODES = frozenset({"invalid_payload", "no_text", "user_not_found", "too_many_attachments"})
# An incoming webhook's path: the workspace's and the webhook's ids, then the token.
URL_PATH = re.compile(r"/services/T[A-Z0-9]+/B[A-Z0-9]+/(?P<secret>[^/]+)")
# A member id (users.validators checks it on the way in; checked again here, where it becomes markup).
MEMBER_ID = re.compile(r"[UW][A-Z0-9]{2,31}")


def escape(text: str) -> list[str]:
    """`text` as Slack plain text, one escaped piece per character."""
    return [_ESCAPES.get(ch, ch) for ch in without_bidi_controls(text)]


class Slack(LineKind):
    name = "slack"
    label = "Slack"
    # About one message a second per webhook (Slack's rate limits page; short bursts are allowed).
    pace = 1.0
    budget = TEXT_MAX
    escape = staticmethod(escape)
    mention_field = "slack_user_id"

    def mention_tag(self, mention: Mention) -> str | None:
        return f"<@{mention.user_id}>" if MEMBER_ID.fullmatch(mention.user_id) else None

    def _compose(self, text: str, mentioned: Sequence[Mention]) -> dict:
        return {
            "text": text,
            "mrkdwn": False,
            "unfurl_links": False,
            "unfurl_media": False,
        }

    def shown_url(self, url: str) -> str:
        # No query: a webhook's URL has none, and one given is not known to be free of a secret.
        return shown_by_shape(url, path=URL_PATH)

    def read(self, *, status: int, headers: Mapping[str, str], body: str) -> Reading:
        reading = standard_reading(status=status, headers=headers)
        if not 400 <= status < 500:
            return reading
        code = body.strip()[:64]
        if code in GONE_CODES:
            return Reading(Verdict.GONE, code=code)
        if code in REFUSED_CODES and reading.verdict == Verdict.REFUSED:
            return Reading(Verdict.REFUSED, code=code)
        return reading
