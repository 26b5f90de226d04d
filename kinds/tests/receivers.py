"""Receivers shaped like Slack, Discord and Teams Workflows: what each takes, what each refuses, whom it notifies.

Each `judge_*` is the service's side of one request as its documentation
describes it: the answer it gives (status and body), and, for a message it
takes, how many mentions and links it would render (a mention notifies
people; a link with a label of the sender's choosing hides where it goes).
`ShapedReceiver` serves one of them over HTTP for the end-to-end tests, with
the service's pace enforced (429s shaped like the service's) and a switch to
answer as if the destination were deleted.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from devtools.sink import Received, Reply, WebhookSink


@dataclass(frozen=True)
class Judgement:
    status: int
    body: bytes
    # What the message rendered would do, for a message taken (0 otherwise).
    mentions: int = 0
    links: int = 0
    # Whom its mentions would notify, one entry a mention: a user's id (U024BE7LH, a snowflake, a
    # Teams user), or a crowd ("!channel", "@everyone", "&role", "#channel").
    mentioned: tuple[str, ...] = ()
    # The text a person would read (for a message taken).
    shown: str = ""
    headers: dict = field(default_factory=dict)

    @property
    def taken(self) -> bool:
        return 200 <= self.status < 300


def _decoded(raw: bytes) -> dict | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


# --- Slack ---------------------------------------------------------------------------------

# Slack's control sequences: anything between < and > (docs: "Formatting text for app surfaces").
_SLACK_SEQUENCE = re.compile(r"<([^<>]*)>")
SLACK_TEXT_LIMIT = 40_000  # Slack cuts a longer text; we never want ours cut by Slack.


def judge_slack(raw: bytes) -> Judgement:
    """An incoming webhook: JSON with a non-empty `text`; `ok`, or `invalid_payload`/`no_text`."""
    body = _decoded(raw)
    if body is None:
        return Judgement(400, b"invalid_payload")
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        return Judgement(400, b"no_text")
    if len(text) > SLACK_TEXT_LIMIT:
        return Judgement(400, b"msg_too_long")
    mentioned: list[str] = []
    links = 0
    for sequence in _SLACK_SEQUENCE.findall(text):
        target = sequence.split("|", 1)[0]
        if target.startswith("@"):
            mentioned.append(target[1:])  # <@U024BE7LH>: that member
        elif target.startswith(("!", "#")):
            mentioned.append(target)  # <!channel>, <!here>, <!everyone>, <!subteam^..>, <#C..>
        else:
            links += 1  # <https://x|label>, <mailto:..>
    if body.get("link_names") in (1, True, "1"):
        mentioned += ["!" + word for word in re.findall(r"@(channel|here|everyone)\b", text)]
    shown = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return Judgement(
        200, b"ok", mentions=len(mentioned), links=links, shown=shown, mentioned=tuple(mentioned)
    )


def slack_formats(raw: bytes) -> bool:
    """Whether Slack would render markup (bold, italic, strike, code, quote) from this body's text."""
    body = _decoded(raw) or {}
    text = body.get("text") or ""
    return body.get("mrkdwn", True) is not False and bool(re.search(r"[*_~`]|^&gt;", text, re.MULTILINE))


# --- Discord -------------------------------------------------------------------------------

DISCORD_CONTENT_LIMIT = 2000
_DISCORD_USER_ROLE = re.compile(r"<@([!&]?)(\d+)>")
DISCORD_ALLOWED_USERS_MAX = 100
_DISCORD_EVERYONE = re.compile(r"(?<!\w)@(everyone|here)\b")
_DISCORD_MASKED_LINK = re.compile(r"\[[^\]]*\]\(")
_DISCORD_MARKUP = re.compile(r"\*|__|~~|\|\||`|^\s*(#{1,3} |-# |> |[-*] )", re.MULTILINE)
ESCAPED = "\x00"


def discord_active(content: str) -> str:
    """The content with every backslash-escaped character masked: what is left is what Discord parses."""
    out, chars = [], iter(content)
    for ch in chars:
        if ch == "\\":
            following = next(chars, "")
            # Discord's escape takes any character but a letter, a digit or whitespace.
            if following and not following.isalnum() and not following.isspace():
                out.append(ESCAPED)
                continue
            out.append(ch + following)
            continue
        out.append(ch)
    return "".join(out)


def discord_shown(content: str) -> str:
    out, chars = [], iter(content)
    for ch in chars:
        if ch == "\\":
            following = next(chars, "")
            if following and not following.isalnum() and not following.isspace():
                out.append(following)
                continue
            out.append(ch + following)
            continue
        out.append(ch)
    return "".join(out)


def _discord_parses(body: dict) -> set[str]:
    """The mention kinds Discord would parse for all ids: all three when `allowed_mentions` is left out."""
    allowed = body.get("allowed_mentions")
    if not isinstance(allowed, dict):
        return {"everyone", "users", "roles"}
    return set(allowed.get("parse") or [])


def _discord_listed(body: dict, kind: str) -> set[str]:
    """The ids `allowed_mentions` names one by one (`users` or `roles`): only those of that kind are pinged."""
    allowed = body.get("allowed_mentions")
    return {str(i) for i in (allowed.get(kind) or [])} if isinstance(allowed, dict) else set()


def _discord_allowed_mentions_problem(body: dict) -> bytes | None:
    """Discord's 400 for an `allowed_mentions` it refuses: a kind both parsed and listed, over 100 ids."""
    allowed = body.get("allowed_mentions")
    if not isinstance(allowed, dict):
        return None
    for kind in ("users", "roles"):
        listed = allowed.get(kind) or []
        if listed and kind in (allowed.get("parse") or []):
            return b'{"message": "Invalid Form Body", "code": 50035, "errors": {"allowed_mentions": ' + (
                b'{"_errors": [{"code": "MESSAGE_ALLOWED_MENTIONS_PARSE_EXCLUSIVE"}]}}}'
            )
        if len(listed) > DISCORD_ALLOWED_USERS_MAX:
            return b'{"message": "Invalid Form Body", "code": 50035, "errors": {"allowed_mentions": ' + (
                b'{"_errors": [{"code": "BASE_TYPE_MAX_LENGTH"}]}}}'
            )
    return None


def judge_discord(raw: bytes) -> Judgement:
    """Execute Webhook: `content` of 1-2,000 characters (or embeds); 204, or 400 Invalid Form Body."""
    body = _decoded(raw)
    if body is None:
        return Judgement(400, b'{"message": "Cannot send an empty message", "code": 50006}')
    content = body.get("content")
    if not isinstance(content, str) or not content:
        return Judgement(400, b'{"message": "Cannot send an empty message", "code": 50006}')
    if len(content) > DISCORD_CONTENT_LIMIT:
        return Judgement(
            400,
            b'{"message": "Invalid Form Body", "code": 50035, "errors": {"content": {"_errors": '
            b'[{"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}]}}}',
        )
    problem = _discord_allowed_mentions_problem(body)
    if problem is not None:
        return Judgement(400, problem)
    parses = _discord_parses(body)
    users, roles = _discord_listed(body, "users"), _discord_listed(body, "roles")
    active = discord_active(content)
    mentioned: list[str] = []
    if "everyone" in parses:
        mentioned += ["@" + word for word in _DISCORD_EVERYONE.findall(active)]
    for kind, snowflake in _DISCORD_USER_ROLE.findall(active):
        if kind == "&":
            if "roles" in parses or snowflake in roles:
                mentioned.append("&" + snowflake)
        elif "users" in parses or snowflake in users:
            mentioned.append(snowflake)
    links = len(_DISCORD_MASKED_LINK.findall(active))
    return Judgement(
        204,
        b"",
        mentions=len(mentioned),
        links=links,
        shown=discord_shown(content),
        mentioned=tuple(mentioned),
    )


def discord_looks_like_a_mention(raw: bytes) -> bool:
    """Whether the content shows what a reader takes for a ping (@everyone, @here, <@id>), parsed or not."""
    active = discord_active((_decoded(raw) or {}).get("content") or "")
    return bool(_DISCORD_EVERYONE.search(active) or _DISCORD_USER_ROLE.search(active))


def discord_formats(raw: bytes) -> bool:
    """Whether Discord would render markup (bold, italic, strike, spoiler, code, heading, quote, list)."""
    active = discord_active((_decoded(raw) or {}).get("content") or "")
    return bool(_DISCORD_MARKUP.search(active)) or bool(re.search(r"(^|\W)_\S", active))


# --- Teams Workflows -----------------------------------------------------------------------

TEAMS_BODY_LIMIT = 28 * 1024
ADAPTIVE = "application/vnd.microsoft.card.adaptive"
_TEAMS_MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\([^)]*\)")


def _card_text(element: dict, *, markdown: list[str], plain: list[str]) -> None:
    kind = element.get("type")
    if kind == "TextBlock" and isinstance(element.get("text"), str):
        markdown.append(element["text"])
    elif kind == "RichTextBlock":
        for inline in element.get("inlines") or []:
            if isinstance(inline, str):
                plain.append(inline)
            elif isinstance(inline, dict) and inline.get("type") == "TextRun":
                plain.append(str(inline.get("text", "")))
    for child in element.get("items") or []:
        if isinstance(child, dict):
            _card_text(child, markdown=markdown, plain=plain)


def judge_teams_flow(raw: bytes) -> Judgement:
    """The "post card when a webhook request is received" flow after the webhook's 202.

    The Judgement's status is what the flow's run ends with: 200 posted, 400 failed
    (the sender never sees it: the webhook has answered 202 already).
    """
    if len(raw) > TEAMS_BODY_LIMIT:
        return Judgement(413, b"RequestEntityTooLarge: the message is over 28 KB")
    body = _decoded(raw)
    attachments = body.get("attachments") if body is not None else None
    if not isinstance(attachments, list) or not attachments:
        return Judgement(
            400, b"InvalidTemplate: The 'foreach' expression evaluated to 'Null': it must be an array"
        )
    markdown: list[str] = []
    plain: list[str] = []
    entities: list[dict] = []
    for attachment in attachments:
        content = attachment.get("content") if isinstance(attachment, dict) else None
        if attachment.get("contentType") != ADAPTIVE or not isinstance(content, dict):
            return Judgement(400, b"BadRequest: the attachment is not an Adaptive Card")
        if content.get("type") != "AdaptiveCard":
            return Judgement(400, b"BadRequest: Property 'type' must be 'AdaptiveCard'")
        for element in content.get("body") or []:
            if isinstance(element, dict):
                _card_text(element, markdown=markdown, plain=plain)
        entities += [
            e
            for e in (content.get("msteams") or {}).get("entities") or []
            if isinstance(e, dict) and e.get("type") == "mention"
        ]
    # A mention entity notifies its user where its text stands in a TextBlock (where markdown, and
    # <at>, are read); a TextRun shows `<at>…</at>` as typed.
    mentioned = tuple(
        str((e.get("mentioned") or {}).get("id"))
        for e in entities
        if isinstance(e.get("text"), str) and any(e["text"] in text for text in markdown)
    )
    links = sum(len(_TEAMS_MARKDOWN_LINK.findall(text)) for text in markdown)
    formats = any(re.search(r"\*\*|(^|\s)_\S|^\s*[-*] |^\s*\d+\. ", t, re.MULTILINE) for t in markdown)
    if not markdown and not plain:
        return Judgement(400, b"BadRequest: the card shows nothing")
    return Judgement(
        200,
        b"posted",
        mentions=len(mentioned),
        links=links + int(formats),
        shown="\n".join(markdown + plain),
        mentioned=mentioned,
    )


# --- over HTTP -----------------------------------------------------------------------------


class ShapedReceiver(WebhookSink):
    """A service's webhook on a local port: its answers (`judge`), its pace, and a switch to be gone.

    `rate`/`burst`: a token bucket as the service's limiter; a request that finds it
    empty gets `throttled()`. `gone`: answer every request as the service answers for
    a deleted webhook or channel. Judgements of what was taken are kept in `taken`.
    """

    def __init__(
        self,
        *,
        judge: Callable[[bytes], Judgement],
        rate: float | None = None,
        burst: int = 1,
        throttled: Callable[[float], Reply] | None = None,
        gone_reply: Reply | None = None,
        accepted_status: int | None = None,
    ) -> None:
        self.judge = judge
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)
        self.filled_mono = time.monotonic()
        self.throttled = throttled or (lambda wait: Reply(status=429, headers={"Retry-After": "1"}))
        self.gone_reply = gone_reply
        self.gone = False
        self.accepted_status = accepted_status
        self.taken: list[Judgement] = []
        self.refused: list[Judgement] = []
        self.throttles = 0
        self.bucket_lock = threading.Lock()
        super().__init__(respond=self._respond)

    def _respond(self, received: Received) -> Reply:
        if self.gone and self.gone_reply is not None:
            return self.gone_reply
        if self.rate is not None:
            with self.bucket_lock:
                now_mono = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now_mono - self.filled_mono) * self.rate)
                self.filled_mono = now_mono
                if self.tokens < 1:
                    self.throttles += 1
                    return self.throttled((1 - self.tokens) / self.rate)
                self.tokens -= 1
        judgement = self.judge(received.raw_body)
        with self.lock:
            (self.taken if judgement.taken else self.refused).append(judgement)
        if self.accepted_status is not None:
            # A Workflows webhook answers 202 before its flow runs, whatever the flow makes of it.
            return Reply(status=self.accepted_status, body=b"")
        return Reply(status=judgement.status, body=judgement.body, headers=judgement.headers)


def discord_throttled(wait: float) -> Reply:
    """Discord's 429: the wait in the JSON body (seconds, a float) and, rounded up, in Retry-After."""
    body = json.dumps(
        {"message": "You are being rate limited.", "retry_after": round(wait, 3), "global": False}
    )
    return Reply(status=429, headers={"Retry-After": str(max(1, int(wait + 0.999)))}, body=body.encode())


def slack_receiver(**kwargs) -> ShapedReceiver:
    return ShapedReceiver(
        judge=judge_slack,
        gone_reply=Reply(status=404, body=b"channel_not_found"),
        throttled=lambda wait: Reply(status=429, headers={"Retry-After": "1"}, body=b"rate_limited"),
        **kwargs,
    )


def discord_receiver(**kwargs) -> ShapedReceiver:
    return ShapedReceiver(
        judge=judge_discord,
        gone_reply=Reply(status=404, body=b'{"message": "Unknown Webhook", "code": 10015}'),
        throttled=discord_throttled,
        **kwargs,
    )


def teams_receiver(**kwargs) -> ShapedReceiver:
    return ShapedReceiver(
        judge=judge_teams_flow,
        gone_reply=Reply(
            status=404,
            body=b'{"error": {"code": "WorkflowNotFound", "message": "The workflow could not be found."}}',
        ),
        accepted_status=202,
        **kwargs,
    )
