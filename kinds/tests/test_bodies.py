"""Each kind's body: what its service takes, mentioning, linking and formatting nothing, whatever the names.

The bodies are judged by the services' shapes in kinds.tests.receivers (what
each refuses, whom each would notify), for the real message template rendered
with names made to attack each format, 10,000 characters of them included.
"""

from __future__ import annotations

import json
import uuid
from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinds import KINDS, kind_for
from kinds.base import BIDI_CONTROLS, fit, utf16_length
from kinds.discord import CONTENT_MAX, ZERO_WIDTH_SPACE
from kinds.slack import TEXT_MAX
from kinds.teams import BODY_MAX_BYTES
from kinds.tests.receivers import (
    discord_formats,
    discord_looks_like_a_mention,
    judge_discord,
    judge_slack,
    judge_teams_flow,
    slack_formats,
)
from scheduling.handlers import get_handler
from scheduling.handlers.base import RecipientRow
from scheduling.messages import render_message

# What a name can carry to ping, link or format in one of the formats (and their escapes, to
# catch a double unescape), and the characters that reorder text.
HOSTILE = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<@U024BE7LH>",
    "<@U1>",
    "<#C024BE7LR>",
    "<!subteam^S012>",
    "<https://evil.example|click here>",
    "<mailto:x@evil.example|mail>",
    "@everyone",
    "@here",
    "@channel",
    "<@123456789012345678>",
    "<@!123>",
    "<@&987>",
    "<t:0:R>",
    "**bold**",
    "__under__",
    "_it_",
    "*it*",
    "~~strike~~",
    "||spoiler||",
    "`code`",
    "```block```",
    "> quote",
    "\n> quote",
    "# Title",
    "\n# Title",
    "\n-# small",
    "- item",
    "\n1. item",
    "[click](https://evil.example)",
    "[click](<https://evil.example>)",
    "&amp;",
    "&lt;!channel&gt;",
    "\\",
    "\\<@1>",
    "\\@everyone",
    "@\u200beveryone",
    "<at>Everyone</at>",
    "\u202e",
    "\u202d",
    "\u2067",
    "\u200f",
    "\u200e",
]
pieces = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12))
names = st.one_of(
    st.lists(pieces, max_size=8).map("".join),
    # 10,000 characters: one attack repeated, or anything.
    st.sampled_from(HOSTILE).map(lambda attack: (attack * (10_000 // len(attack) + 1))[:10_000]),
    st.text(min_size=1, max_size=200).map(lambda text: (text * (10_000 // len(text) + 1))[:10_000]),
)


def message_for(first_name: str, last_name: str) -> str:
    """The birthday message as the scheduler renders it, from its real template."""
    handler = get_handler("BIRTHDAY")
    recipient = RecipientRow(
        id=uuid.uuid4(),
        first_name=first_name,
        last_name=last_name,
        date_of_birth=date(1990, 3, 8),
        timezone="UTC",
        anniversary_date=None,
        send_time=None,
        hide_age=False,
    )
    return render_message(
        template=handler.message_template, handler=handler, user=recipient, occurrence_date=date(2026, 3, 8)
    )


def sent(format_: str, message: str) -> bytes:
    """The body as the transport sends it: JSON, as PostgreSQL's jsonb gives it back (separators with spaces)."""
    return json.dumps(kind_for(format_).body({"message": message}), ensure_ascii=False).encode()


def plain(message: str) -> str:
    return "".join(ch for ch in message if ch not in BIDI_CONTROLS)


property_settings = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)


@property_settings
@given(first_name=names, last_name=names)
def test_a_slack_body_mentions_links_and_formats_nothing_and_shows_the_message_whatever_the_names(
    first_name, last_name
):
    message = message_for(first_name, last_name)
    raw = sent("slack", message)

    judgement = judge_slack(raw)

    assert judgement.taken, judgement.body
    assert (judgement.mentions, judgement.links) == (0, 0)
    assert not slack_formats(raw)
    text = json.loads(raw)["text"]
    assert len(text) <= TEXT_MAX
    shown = judgement.shown
    assert shown == plain(message) or (shown.endswith("…") and plain(message).startswith(shown[:-1]))


@property_settings
@given(first_name=names, last_name=names)
def test_a_discord_body_mentions_links_and_formats_nothing_and_fits_2000_characters_whatever_the_names(
    first_name, last_name
):
    message = message_for(first_name, last_name)
    raw = sent("discord", message)

    judgement = judge_discord(raw)

    assert judgement.taken, judgement.body
    assert (judgement.mentions, judgement.links) == (0, 0)
    assert json.loads(raw)["allowed_mentions"] == {"parse": []}
    assert not discord_looks_like_a_mention(raw)
    assert not discord_formats(raw)
    assert utf16_length(json.loads(raw)["content"]) <= CONTENT_MAX
    shown = judgement.shown.replace(ZERO_WIDTH_SPACE, "")
    expected = plain(message).replace(ZERO_WIDTH_SPACE, "")
    assert shown == expected or (shown.endswith("…") and expected.startswith(shown[:-1]))


@property_settings
@given(first_name=names, last_name=names)
def test_a_teams_card_is_posted_by_the_workflow_mentioning_linking_nothing_within_28_kb_whatever_the_names(
    first_name, last_name
):
    message = message_for(first_name, last_name)
    raw = sent("teams", message)

    judgement = judge_teams_flow(raw)

    assert judgement.taken, judgement.body
    assert (judgement.mentions, judgement.links) == (0, 0)
    assert len(raw) <= BODY_MAX_BYTES
    shown = judgement.shown
    assert shown == plain(message) or (shown.endswith("…") and plain(message).startswith(shown[:-1]))


def test_the_workflow_refuses_what_a_workflow_refuses_so_its_judge_can_fail():
    # A MessageCard (the old teams body), a card without the wrapper, a wrong card type, too big.
    message_card = {"@type": "MessageCard", "@context": "https://schema.org/extensions", "text": "hi"}
    bare_card = {"type": "AdaptiveCard", "body": [{"type": "TextBlock", "text": "hi"}]}
    wrong_type = {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"type": "Card"}}
        ],
    }
    for body in (message_card, bare_card, wrong_type):
        assert not judge_teams_flow(json.dumps(body).encode()).taken, body
    assert not judge_teams_flow(b"x" * (28 * 1024 + 1)).taken


def test_the_services_judges_see_the_attacks_an_unescaped_body_makes():
    # The judges count what the bodies did: without escaping, each name pings or links.
    assert judge_slack(json.dumps({"text": "Hey, <!channel> Ping it's your birthday"}).encode()).mentions == 1
    assert judge_slack(json.dumps({"text": "<https://evil.example|click here>"}).encode()).links == 1
    assert slack_formats(json.dumps({"text": "*bold*"}).encode())
    everyone = json.dumps({"content": "Hey, @everyone Boom it's your birthday"}).encode()
    assert judge_discord(everyone).mentions == 1
    assert discord_looks_like_a_mention(
        json.dumps({"content": "<@1>", "allowed_mentions": {"parse": []}}).encode()
    )
    assert not judge_discord(json.dumps({"content": "x" * 2001}).encode()).taken
    markdown_card = {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "content": {
                    "type": "AdaptiveCard",
                    "body": [{"type": "TextBlock", "text": "[x](https://e.x)"}],
                },
            }
        ],
    }
    assert judge_teams_flow(json.dumps(markdown_card).encode()).links >= 1


def test_the_standard_body_is_the_payload_itself():
    payload = {"message": "Hey, <!channel> it's your birthday", "event_id": "01a2"}

    assert kind_for("standard").body(payload) is payload


@pytest.mark.parametrize("format_", ["slack", "discord", "teams", "teams_messagecard"])
def test_a_chat_body_of_an_ordinary_name_shows_the_message_unchanged(format_):
    message = message_for("Ada", "Lovelace")

    body = kind_for(format_).body({"message": message})

    assert message in json.dumps(body, ensure_ascii=False)


def test_the_legacy_message_card_is_sent_only_to_the_format_that_names_it():
    body = kind_for("teams_messagecard").body({"message": message_for("<b>Ada</b>", "**L**")})

    assert body["@type"] == "MessageCard"
    assert "<b>" not in body["text"] and "**" not in body["text"]
    assert kind_for("teams").body({"message": "x"})["attachments"][0]["content"]["type"] == "AdaptiveCard"


def test_a_cut_never_breaks_an_escape_and_ends_with_an_ellipsis():
    # Each piece is one escaped character: the cut keeps whole pieces only.
    assert fit(["&lt;"] * 10, budget=9) == "&lt;&lt;…"[: len("&lt;&lt;") + 1]
    assert fit(["a", "b"], budget=2) == "ab"
    body = kind_for("slack").body({"message": "<" * 5000})
    assert body["text"].endswith("&lt;…") and len(body["text"]) <= TEXT_MAX


def test_every_kind_in_the_registry_is_a_destination_format_and_back():
    from delivery.models import DestinationFormat

    assert set(DestinationFormat.values) == set(KINDS)
    assert all(DestinationFormat(name).label == channel.label for name, channel in KINDS.items())
