"""Migration 0020: each stored receiver URL is shown as its destination's kind shows it, the token still hidden."""

import pytest

from delivery.credentials.receiver_urls import url_encrypt, url_key, url_redact
from delivery.tests.test_migration_receiver_urls import executor_leaf, migrate

BEFORE = [("delivery", "0019_merge_digests_urlcreds")]
AFTER = [("delivery", "0020_urlparts_url_display")]
TOKEN = "XXsecretTOKEN0123XX"
SLACK = f"https://hooks.slack.com/services/T0001/B0001/{TOKEN}"
DISCORD = f"https://discord.com/api/webhooks/42/{TOKEN}"
LOST = f"https://hooks.slack.com/services/T0001/B0002/{TOKEN}"
LEFT = f"https://hooks.slack.com/services/T0001/B0003/{TOKEN}"


@pytest.fixture
def at_0019(transactional_db):
    old = migrate(BEFORE)
    yield old
    migrate(executor_leaf())


def columns(url: str, *, ciphertext: str | None = None) -> dict:
    return {
        "url_ciphertext": ciphertext or url_encrypt(url),
        "url_key": url_key(url),
        "url_display": url_redact(url),
    }


@pytest.mark.django_db(transaction=True)
def test_stored_urls_are_shown_as_their_kind_shows_them_and_a_rollback_shows_the_host_only(at_0019):
    # given destinations stored with their URLs shown by host only, and their endpoints: one a Slack
    # destination's, one a Discord's, one a standard's, one whose URL no key opens, and an endpoint no
    # destination has any more
    Destination = at_0019.get_model("delivery", "Destination")
    Endpoint = at_0019.get_model("delivery", "Endpoint")
    for name, url, kind, ciphertext in [
        ("team-slack", SLACK, "slack", None),
        ("team-discord", DISCORD, "discord", None),
        ("crm", f"https://crm.example.org/hook/{TOKEN}", "standard", None),
        ("lost-key", LOST, "slack", "not a ciphertext any key opens"),
    ]:
        stored = columns(url, ciphertext=ciphertext)
        Destination.objects.create(name=name, format=kind, **stored)
        Endpoint.objects.create(
            key=stored["url_key"], url_ciphertext=stored["url_ciphertext"], url_display=stored["url_display"]
        )
    left = columns(LEFT)
    Endpoint.objects.create(
        key=left["url_key"], url_ciphertext=left["url_ciphertext"], url_display=left["url_display"]
    )

    # when the migration runs
    new = migrate(AFTER)

    # then each destination and its endpoint show all but the token; what cannot be read or has no kind,
    # the host only
    shown = {
        "team-slack": "https://hooks.slack.com/services/T0001/B0001/…",
        "team-discord": "https://discord.com/api/webhooks/42/…",
        "crm": "https://crm.example.org/…",
        "lost-key": "https://hooks.slack.com/…",
    }
    Destination = new.get_model("delivery", "Destination")
    Endpoint = new.get_model("delivery", "Endpoint")
    assert dict(Destination.objects.values_list("name", "url_display")) == shown
    endpoints = dict(Endpoint.objects.values_list("key", "url_display"))
    assert endpoints == {
        **{key: shown[name] for name, key in Destination.objects.values_list("name", "url_key")},
        left["url_key"]: "https://hooks.slack.com/…",
    }
    assert TOKEN not in str([*Destination.objects.values(), *Endpoint.objects.values()])

    # and a rollback shows every one by its host only again
    old = migrate(BEFORE)
    Destination = old.get_model("delivery", "Destination")
    Endpoint = old.get_model("delivery", "Endpoint")
    assert set(Destination.objects.values_list("url_display", flat=True)) | set(
        Endpoint.objects.values_list("url_display", flat=True)
    ) == {"https://hooks.slack.com/…", "https://discord.com/…", "https://crm.example.org/…"}
