"""Discord webhooks: `{"content": ...}` that mentions no one, at Discord's pace, and its 429s read.

Every body says `allowed_mentions: {"parse": []}`: Discord then notifies no
one, whatever the content holds (its documented default has changed and has
been reported ignored, so it is never left out). What a name could still make
of the content is defused too: `@everyone` and `@here` get a zero-width space
after the `@`, so they do not even look like mentions, and Discord's markdown
characters (and `<`, which starts `<@id>`, `<#channel>`, `<t:...>`) are escaped
with a backslash, so `**x**`, `[label](url)` or `# title` show as typed.
`content` holds at most 2,000 characters, counted as JavaScript counts them.

The one mention it makes: `<@id>` for the person greeted (their Discord user id,
`discord_user_id`, a snowflake of 17 to 20 digits), given only where the
destination mentions and the person agreed, with that id alone in
`allowed_mentions.users`: `{"parse": [], "users": ["id"]}` pings that user and
nobody else, whatever else the content holds (Discord takes at most 100 ids there).

A 429 carries `{"retry_after": seconds, "global": bool}` in its JSON body as
well as a Retry-After header; a deleted webhook answers 404 with code 10015
(Unknown Webhook), a webhook whose token changed 401 with code 50027 (Invalid
Webhook Token): both are gone, and sending on would also earn the sender's
address Discord's temporary block for too many invalid requests.

A webhook's URL is `https://discord.com/api/webhooks/<id>/<token>` (or on
discordapp.com, ptb. or canary., and with an API version: `/api/v10/webhooks/…`):
the id is a number, the token is the secret, and only it is hidden where the
URL is shown. The query parameters Discord documents for executing a webhook
(`wait`, `thread_id`, `with_components`) hold none and are shown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from kinds.base import (
    LineKind,
    Mention,
    Reading,
    Verdict,
    parse_retry_after,
    seconds_or_none,
    shown_by_shape,
    standard_reading,
    utf16_length,
    without_bidi_controls,
)

CONTENT_MAX = 2000
ZERO_WIDTH_SPACE = "\u200b"
# Discord's markdown (bold, italic, underline, strike, spoiler, code, quote, headings,
# lists, masked links) and the `<` that opens a mention or a timestamp.
_MARKDOWN = frozenset("\\*_~`|>#-[]()<:")
_DEFUSED = ("@everyone", "@here")
GONE_CODES = {10015: "unknown_webhook", 50027: "invalid_webhook_token"}
# A webhook's path: the API (of a version, or the default one), the webhook's id, then its token.
URL_PATH = re.compile(r"/api(?:/v[0-9]+)?/webhooks/[0-9]+/(?P<secret>[^/]+)")
URL_QUERY = frozenset({"wait", "thread_id", "with_components"})
# A user id, a snowflake (users.validators checks it on the way in; checked again here, where it becomes markup).
SNOWFLAKE = re.compile(r"[0-9]{17,20}")


def escape(text: str) -> list[str]:
    """`text` as Discord content that formats nothing, one escaped piece per character."""
    text = without_bidi_controls(text)
    for word in _DEFUSED:
        text = text.replace(word, "@" + ZERO_WIDTH_SPACE + word[1:])
    return ["\\" + ch if ch in _MARKDOWN else ch for ch in text]


def _json_object(body: str) -> dict:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


class Discord(LineKind):
    name = "discord"
    label = "Discord"
    # 5 requests per 2 s per webhook (its X-RateLimit headers), spread evenly.
    pace = 2.5
    budget = CONTENT_MAX
    escape = staticmethod(escape)
    size = staticmethod(utf16_length)

    def shown_url(self, url: str) -> str:
        return shown_by_shape(url, path=URL_PATH, public_query=URL_QUERY)

    mention_field = "discord_user_id"

    def mention_tag(self, mention: Mention) -> str | None:
        return f"<@{mention.user_id}>" if SNOWFLAKE.fullmatch(mention.user_id) else None

    def _compose(self, text: str, mentioned: Sequence[Mention]) -> dict:
        allowed: dict = {"parse": []}
        if mentioned:
            # Exactly the people tagged: an id left out of `users` is not pinged, one in it but not
            # tagged pings nobody.
            allowed["users"] = list(dict.fromkeys(mention.user_id for mention in mentioned))
        return {"content": text, "allowed_mentions": allowed}

    def read(self, *, status: int, headers: Mapping[str, str], body: str) -> Reading:
        if status == 429:
            # The body's figure is finer (a float) than the header's whole seconds; either will do.
            retry_after = seconds_or_none(_json_object(body).get("retry_after"))
            if retry_after is None:
                retry_after = parse_retry_after(headers.get("Retry-After"))
            return Reading(Verdict.RETRY, retry_after=retry_after)
        if status in (401, 404):
            code = _json_object(body).get("code")
            if isinstance(code, int) and code in GONE_CODES:
                return Reading(Verdict.GONE, code=GONE_CODES[code])
        return standard_reading(status=status, headers=headers)
