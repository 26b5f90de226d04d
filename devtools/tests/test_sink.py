"""The local sink (devtools/sink.py): what `make run` shows of a mail and of a chat message."""

from __future__ import annotations

import json
import smtplib
import urllib.request
from email.message import EmailMessage

import pytest

from devtools.ports import free_port
from devtools.sink import WebhookSink, shown_text
from kinds import kind_for


@pytest.fixture
def sink():
    with WebhookSink(smtp_port=free_port()) as running:
        yield running


def page(sink: WebhookSink) -> str:
    host, port = sink.server.server_address[:2]
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=10) as response:
        return response.read().decode()


def post(sink: WebhookSink, body: dict) -> None:
    request = urllib.request.Request(
        sink.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10):
        pass


def test_a_mail_sent_over_smtp_is_listed_with_its_text_and_the_headers_that_matter(sink):
    # given a greeting as the product mails it: text and HTML, with the unsubscribe headers
    message = EmailMessage()
    message["From"] = "Greetings <greetings@example.org>"
    message["To"] = "Zoë Ada <ada@example.com>"
    message["Subject"] = "Happy birthday, Zoë & Ada!"
    message["Message-ID"] = "<k-123@example.org>"
    message["List-Unsubscribe"] = "<https://example.org/p/unsubscribe/abc/>"
    message["List-Unsubscribe-Post"] = "List-Unsubscribe=One-Click"
    message["Auto-Submitted"] = "auto-generated"
    message["X-Other"] = "not shown"
    message.set_content("Happy birthday, Zoë!\nAll the best.")
    message.add_alternative("<p>Happy birthday, <b>HTML</b>!</p>", subtype="html")

    # when it is sent to the sink's SMTP port
    host, port = sink.smtp_address
    with smtplib.SMTP(host, port, timeout=10) as smtp:
        smtp.send_message(message)

    # then the sink holds it, and its page lists it: From, To, Subject, the text part, the headers
    [mail] = sink.mail
    assert mail.rcpt_tos == ["ada@example.com"]
    shown = page(sink)
    assert "Greetings &lt;greetings@example.org&gt;" in shown
    assert "Zoë Ada &lt;ada@example.com&gt;" in shown
    assert "Happy birthday, Zoë &amp; Ada!" in shown
    assert "Happy birthday, Zoë!\nAll the best." in shown
    assert "&lt;k-123@example.org&gt;" in shown
    assert "&lt;https://example.org/p/unsubscribe/abc/&gt;" in shown
    assert "List-Unsubscribe=One-Click" in shown
    assert "auto-generated" in shown
    assert "not shown" not in shown
    assert "<b>HTML</b>" not in shown  # the text part, not the HTML one
    assert f"{host}:{port}" in shown


def test_a_relay_with_a_user_and_password_reaches_the_sink_too(sink):
    host, port = sink.smtp_address
    with smtplib.SMTP(host, port, timeout=10) as smtp:
        smtp.login("greetings", "any password")
        smtp.sendmail("greetings@example.org", ["ada@example.com"], b"Subject: Hi\r\n\r\nHello Ada\r\n")

    [mail] = sink.mail
    assert (mail.header("Subject"), mail.text) == ("Hi", "Hello Ada\n")


def test_a_slack_body_is_shown_as_its_text(sink):
    # given a greeting as the Slack kind shapes it
    body = kind_for("slack").body({"message": "Happy birthday, Ada <3"})

    # when it is POSTed to the sink, then the page shows its text (escaped), not a blank line
    post(sink, body)
    assert "Happy birthday, Ada &amp;lt;3" in page(sink)


@pytest.mark.parametrize("kind", ["slack", "discord", "teams", "teams_messagecard", "standard"])
def test_each_kinds_body_shows_the_greetings_text(kind):
    # (words without markup: the connector card escapes Markdown's, as Teams reads it)
    body = kind_for(kind).body({"message": "Happy birthday Ada"})
    assert "Happy birthday Ada" in shown_text(body)


def test_slack_blocks_and_a_standard_digest_show_their_lines():
    blocks = {
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": "Today"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": "Ada turns 34"}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": "Grace too"}]},
        ]
    }
    assert shown_text(blocks) == "Today\nAda turns 34\nGrace too"
    digest = {"type": "digest", "heading": "Today:", "occurrences": [{"line": "Ada"}, {"line": "Grace"}]}
    assert shown_text(digest) == "Today:\nAda\nGrace"
    # a body of a shape no kind has: its JSON, never a blank line
    assert shown_text({"unknown": 1}) == '{"unknown": 1}'
