"""What each kind shows of a receiver URL: all but the part it knows is the credential, else the host only."""

import pytest

from kinds import KINDS, kind_for
from kinds.base import SHOWN_MAX, host_only

TOKEN = "XXsecretTOKEN0123456789XX"
SIG = "SIGsecret0123456789abcdefSIG"
WORKFLOWS_QUERY = f"api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={SIG}"
WORKFLOWS_SHOWN_QUERY = "api-version=2016-06-01&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig=…"


def shown(kind: str, url: str) -> str:
    return kind_for(kind).shown_url(url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"https://hooks.slack.com/services/T0000/B0000/{TOKEN}",
            "https://hooks.slack.com/services/T0000/B0000/…",
        ),
        # Spelt as url_normalise spells it: scheme and host lower-cased, the default port left out.
        (
            f"HTTPS://Hooks.Slack.com:443/services/T0A1B2C3/B4D5E6F7/{TOKEN}",
            "https://hooks.slack.com/services/T0A1B2C3/B4D5E6F7/…",
        ),
        # A relay or a test receiver with Slack's path hides the token where Slack's URL has it.
        (
            f"http://127.0.0.1:8001/services/T0001/B0001/{TOKEN}",
            "http://127.0.0.1:8001/services/T0001/B0001/…",
        ),
        # Not Slack's shape: the host only.
        (f"https://hooks.slack.com/services/T0000/B0000/{TOKEN}/", "https://hooks.slack.com/…"),
        (f"https://hooks.slack.com/services/T0000/{TOKEN}", "https://hooks.slack.com/…"),
        (f"https://hooks.slack.com/services/{TOKEN}/B0000/x", "https://hooks.slack.com/…"),
        (f"https://hooks.slack.com/Services/T0000/B0000/{TOKEN}", "https://hooks.slack.com/…"),
        (f"https://hooks.slack.com/workflows/T0000/A0000/1/{TOKEN}", "https://hooks.slack.com/…"),
        (f"https://hooks.slack.com/services/T0000/B0000/x?key={TOKEN}", "https://hooks.slack.com/…"),
        (f"https://relay.example/{TOKEN}/services/T0000/B0000/x", "https://relay.example/…"),
        (f"https://user:{TOKEN}@hooks.slack.com/services/T0000/B0000/x", "https://hooks.slack.com/…"),
    ],
)
def test_slack_shows_the_workspace_and_webhook_ids_and_hides_the_token(url, expected):
    assert shown("slack", url) == expected
    assert TOKEN not in shown("slack", url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"https://discord.com/api/webhooks/112233445566778899/{TOKEN}",
            "https://discord.com/api/webhooks/112233445566778899/…",
        ),
        (
            f"https://discordapp.com/api/webhooks/1/{TOKEN}",
            "https://discordapp.com/api/webhooks/1/…",
        ),
        (
            f"https://PTB.Discord.com:443/api/v10/webhooks/42/{TOKEN}",
            "https://ptb.discord.com/api/v10/webhooks/42/…",
        ),
        (
            f"https://canary.discord.com/api/webhooks/42/{TOKEN}?thread_id=99&wait=true",
            "https://canary.discord.com/api/webhooks/42/…?thread_id=99&wait=true",
        ),
        # Not Discord's shape: the host only.
        (f"https://discord.com/api/webhooks/42/{TOKEN}/slack", "https://discord.com/…"),
        (f"https://discord.com/api/webhooks/{TOKEN}/42", "https://discord.com/…"),
        (f"https://discord.com/api/webhooks/42/{TOKEN}?token={TOKEN}", "https://discord.com/…"),
        (f"https://discord.com/api/webhooks/42/x?thread_id=1;key={TOKEN}", "https://discord.com/…"),
        ("https://discord.com/api/webhooks/42/", "https://discord.com/…"),
    ],
)
def test_discord_shows_the_webhook_id_and_hides_the_token(url, expected):
    assert shown("discord", url) == expected
    assert TOKEN not in shown("discord", url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"https://prod-27.westeurope.logic.azure.com:443/workflows/0123456789abcdef0123456789abcdef"
            f"/triggers/manual/paths/invoke?{WORKFLOWS_QUERY}",
            "https://prod-27.westeurope.logic.azure.com/workflows/0123456789abcdef0123456789abcdef"
            f"/triggers/manual/paths/invoke?{WORKFLOWS_SHOWN_QUERY}",
        ),
        (
            "https://default0123.ab.environment.api.powerplatform.com/powerautomate/automations/direct"
            f"/workflows/0123abcd/triggers/manual/paths/invoke?{WORKFLOWS_QUERY}",
            "https://default0123.ab.environment.api.powerplatform.com/powerautomate/automations/direct"
            f"/workflows/0123abcd/triggers/manual/paths/invoke?{WORKFLOWS_SHOWN_QUERY}",
        ),
        # The signature is hidden wherever it stands and however its name is spelt.
        (
            f"https://flows.example/workflows/abc/triggers/manual/paths/invoke?sig={SIG}&api-version=1",
            "https://flows.example/workflows/abc/triggers/manual/paths/invoke?sig=…&api-version=1",
        ),
        (
            f"https://flows.example/workflows/abc/triggers/manual/paths/invoke?%73ig={SIG}",
            "https://flows.example/workflows/abc/triggers/manual/paths/invoke?%73ig=…",
        ),
        # Not a flow's shape: the host only.
        (
            f"https://flows.example/workflows/abc/triggers/manual/paths/invoke?{WORKFLOWS_QUERY}&code={SIG}",
            "https://flows.example/…",
        ),
        (
            "https://flows.example/workflows/abc/triggers/manual/paths/invoke?api-version=1",
            "https://flows.example/…",
        ),
        ("https://flows.example/workflows/abc/triggers/manual/paths/invoke?sig=", "https://flows.example/…"),
        (
            f"https://flows.example/workflows/abc/triggers/manual/paths/invoke?sv=1.0;sig={SIG}&sig=x",
            "https://flows.example/…",
        ),
        (f"https://flows.example/workflows/abc/triggers/manual/run?sig={SIG}", "https://flows.example/…"),
        (
            f"https://flows.example/{SIG}/workflows/abc/triggers/manual/paths/invoke?sig=x",
            "https://flows.example/…",
        ),
    ],
)
def test_teams_workflows_show_the_flow_and_its_query_and_hide_the_signature(url, expected):
    assert shown("teams", url) == expected
    assert SIG not in shown("teams", url)


@pytest.mark.parametrize(
    "url",
    [
        "https://contoso.webhook.office.com/webhookb2/aaaaaaaa-1111-2222-3333-bbbbbbbbbbbb@cccccccc-4444-5555"
        f"-6666-dddddddddddd/IncomingWebhook/{TOKEN}/eeeeeeee-7777-8888-9999-ffffffffffff",
    ],
)
def test_a_teams_connectors_url_is_a_credential_in_every_part_of_its_path_so_only_its_host_shows(url):
    assert shown("teams_messagecard", url) == "https://contoso.webhook.office.com/…"


@pytest.mark.parametrize(
    "url",
    [
        f"https://receiver.example.org/hooks/{TOKEN}",
        f"https://receiver.example.org/services/T0000/B0000/{TOKEN}",
        f"https://receiver.example.org/api/webhooks/1/{TOKEN}?sig={TOKEN}",
    ],
)
def test_a_standard_receiver_shows_its_host_only_wherever_its_secret_may_be(url):
    assert shown("standard", url) == "https://receiver.example.org/…"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_shows_what_is_no_url_as_an_ellipsis_and_keeps_a_port_and_an_ipv6_host(kind):
    assert shown(kind, "not a url") == "…"
    assert shown(kind, "https://example.org:99999/x") == "…"
    assert shown(kind, "http://[::1]:8080/anything") == "http://[::1]:8080/…"


@pytest.mark.parametrize("kind", ["slack", "discord", "teams"])
def test_a_shown_form_longer_than_the_column_falls_back_to_the_host(kind):
    long = "A" * SHOWN_MAX
    url = {
        "slack": f"https://hooks.slack.com/services/T{long}/B0000/{TOKEN}",
        "discord": f"https://discord.com/api/webhooks/{'1' * SHOWN_MAX}/{TOKEN}",
        "teams": f"https://flows.example/workflows/{long}/triggers/manual/paths/invoke?sig={SIG}",
    }[kind]
    assert shown(kind, url) == host_only(url)


def test_the_host_only_form_is_scheme_host_and_a_port_other_than_the_schemes():
    assert host_only(f"HTTPS://User:{TOKEN}@Example.ORG:443/path?q={TOKEN}#f") == "https://example.org/…"
    assert host_only("http://example.org:8080/") == "http://example.org:8080/…"
    assert host_only("http://example.org:443/") == "http://example.org:443/…"
