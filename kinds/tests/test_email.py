"""The email kind: its body from the standard payload, text safe for each part, and how it reads SMTP replies."""

from __future__ import annotations

import pytest

from kinds import Verdict
from kinds.email import AUTH, CONNECT, DATA, MAIL, RCPT, Email, header_safe

EMAIL = Email()
PAYLOAD = {
    "message": "Hey, <b>Ada</b> & co\r\nsee you\x00",
    "subject": "Happy birthday, Ada!\r\nBcc: x@example.net",
    "email": "ada@example.org",
    "user_id": "u1",
    "event_id": "e1",
    "event_type": "BIRTHDAY",
}


def test_the_body_carries_subject_text_escaped_html_and_the_address():
    body = EMAIL.body(PAYLOAD)
    assert body["subject"] == "Happy birthday, Ada! Bcc: x@example.net"
    assert body["text"] == "Hey, <b>Ada</b> & co\nsee you"
    assert "<p>Hey, &lt;b&gt;Ada&lt;/b&gt; &amp; co</p><p>see you</p>" in body["html"]
    assert body["to"] == "ada@example.org"
    assert (body["user_id"], body["event_id"], body["event_type"]) == ("u1", "e1", "BIRTHDAY")
    assert EMAIL.transport == "smtp"


def test_a_digest_is_its_heading_as_subject_and_every_line_for_the_fixed_addresses():
    payload = {
        "heading": "Birthdays on 10 December",
        "occurrences": [{"line": f"Person {n}'s birthday", "user_id": str(n)} for n in range(300)],
    }
    body = EMAIL.digest_body(payload)
    assert body["subject"] == "Birthdays on 10 December"
    assert body["to"] == ""
    assert body["text"].count("\n") == 300
    assert "Person 299&#x27;s birthday" in body["html"]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Ada\u202eecalevoL", "Ada ecalevoL"),
        ("a\tb\x7fc", "a b c"),
        ("x" * 300, "x" * 199 + "…"),
        ("Zoë 🎂", "Zoë 🎂"),
    ],
)
def test_a_header_value_is_one_safe_line(text, shown):
    assert header_safe(text) == shown


@pytest.mark.parametrize(
    ("step", "code", "verdict"),
    [
        (DATA, 250, Verdict.DELIVERED),
        (RCPT, 451, Verdict.RETRY),
        (RCPT, 550, Verdict.REFUSED),
        (DATA, 554, Verdict.REFUSED),
        (DATA, None, Verdict.UNKNOWN),
        (CONNECT, None, Verdict.RETRY),
        (MAIL, 421, Verdict.RETRY),
        (AUTH, 535, Verdict.REFUSED),
    ],
)
def test_smtp_replies_read_by_step(step, code, verdict):
    assert EMAIL.read_smtp(step=step, code=code).verdict == verdict
