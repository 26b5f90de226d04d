"""A digest's body per kind: every name while they fit; past the service's limit, whole lines and "… and N more"."""

import json

import pytest

from kinds import KINDS
from kinds.discord import CONTENT_MAX
from kinds.slack import TEXT_MAX
from kinds.teams import BODY_MAX_BYTES

NAMES = 5000


def digest(count: int) -> dict:
    return {
        "type": "digest",
        "digest_key": "digest-" + "0" * 25,
        "date": "2026-11-27",
        "first_date": "2026-11-27",
        "last_date": "2026-11-27",
        "heading": "Today, Friday 27 November:",
        "occurrences": [
            {
                "event_id": f"00000000-0000-0000-0000-{i:012d}",
                "event_type": "BIRTHDAY",
                "user_id": f"00000000-0000-0000-0000-{i:012d}",
                "occurrence_date": "2026-11-27",
                "idempotency_key": f"event-{i:026d}",
                "line": f"Person{i} <Lastname>'s birthday",
            }
            for i in range(count)
        ],
    }


def shown_text(kind: str, body: dict) -> str:
    if kind == "slack":
        return body["text"]
    if kind == "discord":
        return body["content"]
    if kind == "teams":
        blocks = body["attachments"][0]["content"]["body"]
        return "\n".join(block["inlines"][0]["text"] for block in blocks)
    return body["text"]


@pytest.mark.parametrize("kind", ["slack", "discord", "teams", "teams_messagecard"])
def test_a_digest_of_three_names_every_one_on_its_own_line(kind):
    text = shown_text(kind, KINDS[kind].digest_body(digest(3)))

    assert text.count("Person") == 3 and "more" not in text
    assert text.index("Today") < text.index("Person0") < text.index("Person2")


@pytest.mark.parametrize(
    ("kind", "fits"),
    [
        ("slack", lambda body: len(body["text"]) <= TEXT_MAX),
        ("discord", lambda body: len(body["content"].encode("utf-16-le")) // 2 <= CONTENT_MAX),
        ("teams", lambda body: len(json.dumps(body, ensure_ascii=False).encode()) <= BODY_MAX_BYTES),
        (
            "teams_messagecard",
            lambda body: len(json.dumps(body, ensure_ascii=False).encode()) <= BODY_MAX_BYTES,
        ),
    ],
)
def test_a_digest_of_5000_names_keeps_whole_lines_within_the_limit_and_says_how_many_more(kind, fits):
    body = KINDS[kind].digest_body(digest(NAMES))

    assert fits(body)
    text = shown_text(kind, body)
    kept = text.count("Person")
    assert 0 < kept < NAMES
    # whole lines only, the last one counting the rest, escaped for the kind
    assert text.rstrip().endswith(f"and {NAMES - kept:,} more")
    assert "<Lastname>" not in text or kind in ("teams",)


@pytest.mark.parametrize("kind", ["slack", "discord", "teams", "teams_messagecard"])
def test_a_german_digest_cut_short_says_how_many_more_in_german(kind):
    body = KINDS[kind].digest_body({**digest(NAMES), "language": "de"})

    text = shown_text(kind, body).rstrip()
    kept = text.count("Person")
    assert text.endswith(f"und {NAMES - kept:,} weitere".replace(",", ".")) and "more" not in text


def test_the_standard_digest_lists_every_occurrence_with_its_key():
    body = KINDS["standard"].digest_body(digest(NAMES))

    assert len(body["occurrences"]) == NAMES
    assert body["occurrences"][4999]["idempotency_key"] == f"event-{4999:026d}"
