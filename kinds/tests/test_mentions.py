"""Each chat kind's mention: exactly the person given, once, judged by the services' shapes; nobody else ever.

The bodies are judged by kinds.tests.receivers, which reports whom a message
taken would notify (an id, or a crowd such as `!channel` or `@everyone`).
"""

from __future__ import annotations

import json

import pytest

from kinds import KINDS, Mention, kind_for
from kinds.base import MENTIONS_MAX
from kinds.discord import CONTENT_MAX
from kinds.teams import LABEL_FALLBACK, mention_label
from kinds.tests.receivers import judge_discord, judge_slack, judge_teams_flow

JUDGES = {"slack": judge_slack, "discord": judge_discord, "teams": judge_teams_flow}
IDS = {"slack": "U024BE7LH", "discord": "123456789012345678", "teams": "ada@example.com"}
HOSTILE_NAMES = [
    "<!channel>",
    "@everyone @here",
    "<@U999999999> <@987654321098765432>",
    "<at>Everyone</at>",
    "</at><at>x</at>",
    "**Boom** [x](https://evil.example)",
    "\u202eevil",
]


def judged(format_: str, body: dict):
    return JUDGES[format_](json.dumps(body, ensure_ascii=False).encode())


def digest(people: list[tuple[str, str]]) -> dict:
    """A digest payload naming each (user_id, name), one line each."""
    return {
        "heading": "Today, Friday 27 November:",
        "occurrences": [{"user_id": user_id, "line": f"{name}'s birthday"} for user_id, name in people],
    }


def test_only_slack_discord_and_teams_mention_each_by_its_own_field():
    assert {name: kind.mention_field for name, kind in KINDS.items() if kind.mention_field} == {
        "slack": "slack_user_id",
        "discord": "discord_user_id",
        "teams": "teams_user_id",
    }


@pytest.mark.parametrize("format_", ["slack", "discord", "teams"])
@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_message_mentions_exactly_the_person_given_whatever_their_name(format_, name):
    mention = Mention(user_id=IDS[format_], name=name)

    judgement = judged(
        format_, kind_for(format_).body({"message": f"Happy birthday, {name}!"}, mention=mention)
    )

    assert judgement.taken
    assert judgement.mentioned == (IDS[format_],)


@pytest.mark.parametrize("format_", ["slack", "discord", "teams", "standard", "teams_messagecard"])
def test_without_a_mention_a_message_mentions_nobody(format_):
    body = kind_for(format_).body({"message": "Happy birthday, <!channel> @everyone!"})
    if format_ in JUDGES:
        assert judged(format_, body).mentioned == ()
    assert "<@" not in json.dumps(body).replace("\\\\<@", "")


@pytest.mark.parametrize("format_", ["standard", "teams_messagecard"])
def test_a_kind_that_does_not_mention_ignores_a_mention(format_):
    payload = {"message": "Happy birthday, Ada!"}
    assert kind_for(format_).body(payload, mention=Mention("U024BE7LH", "Ada")) == kind_for(format_).body(
        payload
    )


@pytest.mark.parametrize(
    ("format_", "bad_id"),
    [
        ("slack", "U1> <!channel"),
        ("slack", "@ada"),
        ("discord", "1> @everyone <@2"),
        ("teams", "ada lovelace"),
    ],
)
def test_an_id_not_of_the_services_shape_is_never_made_markup(format_, bad_id):
    # The validators refuse these on the way in; the kinds check again where an id becomes markup.
    body = kind_for(format_).body({"message": "Hi"}, mention=Mention(bad_id, "Ada"))
    assert judged(format_, body).mentioned == ()


def test_discord_allows_exactly_the_user_it_tags():
    body = kind_for("discord").body({"message": "Hi @everyone"}, mention=Mention(IDS["discord"], "Ada"))
    assert body["allowed_mentions"] == {"parse": [], "users": [IDS["discord"]]}
    assert body["content"].startswith(f"<@{IDS['discord']}> ")


def test_teams_puts_the_mention_in_a_textblock_of_its_own_with_its_one_entity():
    body = kind_for("teams").body(
        {"message": "Happy birthday!"}, mention=Mention("ada@example.com", "Ada <b>Love</b>")
    )
    card = body["attachments"][0]["content"]
    assert card["body"][0] == {"type": "TextBlock", "text": "<at>Ada b Love b</at>", "wrap": True}
    assert card["body"][1]["type"] == "RichTextBlock"
    assert card["msteams"]["entities"] == [
        {
            "type": "mention",
            "text": "<at>Ada b Love b</at>",
            "mentioned": {"id": "ada@example.com", "name": "Ada b Love b"},
        }
    ]


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("Ada Lovelace", "Ada Lovelace"),
        ("José Núñez-O'Brien Jr.", "José Núñez-O'Brien Jr."),
        ("</at><at>Everyone", "at at Everyone"),
        ("李小龍", "李小龍"),
    ],
)
def test_a_teams_mentions_label_is_the_name_without_markup(name, label):
    assert mention_label(name, "ada@example.com") == label


def test_a_teams_mention_of_a_name_that_is_all_markup_shows_the_upn_or_no_words():
    assert mention_label("**_~~", "ada.l@example.com") == "ada.l"
    assert mention_label("**_~~", "8c2f5a7e-1b3d-4e6f-9a0b-2c4d6e8f0a1b") == LABEL_FALLBACK


@pytest.mark.parametrize("format_", ["slack", "discord", "teams"])
def test_a_digest_mentions_each_person_who_agreed_once_and_names_the_rest(format_):
    people = [("u1", "Ada"), ("u2", "<!channel> @everyone"), ("u1", "Ada"), ("u3", "Grace")]
    mentions = {"u1": Mention(IDS[format_], "Ada"), "u2": Mention(_other_id(format_), "<!channel> @everyone")}

    body = kind_for(format_).digest_body(digest(people), mentions=mentions)

    judgement = judged(format_, body)
    assert judgement.taken
    assert sorted(judgement.mentioned) == sorted([IDS[format_], _other_id(format_)])
    assert judgement.shown.count("Grace's birthday") == 1


def _other_id(format_: str) -> str:
    return {
        "slack": "W0CHANNEL1",
        "discord": "223456789012345678",
        "teams": "8c2f5a7e-1b3d-4e6f-9a0b-2c4d6e8f0a1b",
    }[format_]


@pytest.mark.parametrize("format_", ["slack", "discord", "teams"])
def test_a_digest_mentions_at_most_the_most_discord_allows_and_still_names_everyone_that_fits(format_):
    count = MENTIONS_MAX + 20
    people = [(f"u{i}", f"P{i}") for i in range(count)]
    ids = [f"{100000000000000000 + i}" if format_ == "discord" else f"U{i:08d}" for i in range(count)]
    if format_ == "teams":
        ids = [f"p{i}@example.com" for i in range(count)]
    mentions = {f"u{i}": Mention(ids[i], f"P{i}") for i in range(count)}

    body = kind_for(format_).digest_body(digest(people), mentions=mentions)

    judgement = judged(format_, body)
    assert judgement.taken, judgement.body
    assert 0 < len(judgement.mentioned) <= MENTIONS_MAX
    assert len(set(judgement.mentioned)) == len(judgement.mentioned)
    if format_ == "discord":
        assert len(body["content"]) <= CONTENT_MAX
        assert set(body["allowed_mentions"]["users"]) == set(judgement.mentioned)


def test_discord_refuses_more_than_100_listed_users_which_is_why_a_digest_lists_no_more():
    too_many = {
        "content": "x",
        "allowed_mentions": {"parse": [], "users": [str(10**17 + i) for i in range(101)]},
    }
    assert judge_discord(json.dumps(too_many).encode()).status == 400
