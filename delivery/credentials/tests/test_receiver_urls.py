"""Receiver URLs as credentials: one spelling per receiver, a keyed identity, a redacted form (delivery.credentials.receiver_urls)."""

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ValidationError

from delivery.credentials.receiver_urls import (
    url_decrypt,
    url_encrypt,
    url_key,
    url_normalise,
    url_normalise_keeping_userinfo,
    url_redact,
)

SLACK = "https://hooks.slack.com/services/T0001/B0001/XXXXXXXXXXXXXXXXXXXXXXXX"


@pytest.mark.parametrize(
    ("given", "normalised"),
    [
        (
            "HTTPS://Hooks.Slack.COM/services/T0001/B0001/Tok",
            "https://hooks.slack.com/services/T0001/B0001/Tok",
        ),
        ("https://receiver.example:443/hook", "https://receiver.example/hook"),
        ("http://receiver.example:80/hook", "http://receiver.example/hook"),
        ("https://receiver.example:8443/hook", "https://receiver.example:8443/hook"),
        ("https://receiver.example/hook#x", "https://receiver.example/hook"),
        ("https://receiver.example", "https://receiver.example/"),
        ("  https://receiver.example/hook?sig=AbC  ", "https://receiver.example/hook?sig=AbC"),
        ("https://[::1]:443/hook", "https://[::1]/hook"),
    ],
)
def test_spellings_of_one_receiver_are_one_url_and_one_key(given, normalised):
    assert url_normalise(given) == normalised
    assert url_key(url_normalise(given)) == url_key(normalised)


def test_path_and_query_keep_their_case_and_tell_receivers_apart():
    # A token's case matters: Discord's and Slack's tokens are case-sensitive.
    assert url_normalise("https://r.example/Hook?sig=AbC") == "https://r.example/Hook?sig=AbC"
    assert url_key(url_normalise("https://r.example/hook/ABC")) != url_key(
        url_normalise("https://r.example/hook/abc")
    )


@pytest.mark.parametrize(
    "url",
    ["http://user:pa55@receiver.example/hook", "https://user@receiver.example/", "https://:pw@r.example/"],
)
def test_a_user_or_password_in_the_url_is_refused_without_echoing_it(url):
    with pytest.raises(ValidationError) as refused:
        url_normalise(url)

    assert "user name or password" in refused.value.messages[0]
    assert "pa55" not in refused.value.messages[0] and "user@" not in refused.value.messages[0]


def test_a_migrated_url_keeps_its_user_info_in_its_one_spelling():
    assert url_normalise_keeping_userinfo("HTTP://u:p@R.example:80/h#f") == "http://u:p@r.example/h"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (SLACK, "https://hooks.slack.com/…"),
        ("https://discord.com/api/webhooks/123456/tokenTOKENtoken", "https://discord.com/…"),
        (
            "https://prod.westeurope.logic.azure.com:443/workflows/abc/triggers/manual?sig=SECRETSIG",
            "https://prod.westeurope.logic.azure.com/…",
        ),
        ("http://user:pa55@127.0.0.1:8001/hook", "http://127.0.0.1:8001/…"),
        ("https://[::1]:8443/x", "https://[::1]:8443/…"),
        ("not a url", "…"),
    ],
)
def test_the_redacted_form_names_the_host_and_never_the_token(url, shown):
    assert url_redact(url) == shown


def test_the_key_depends_on_the_secret_key_and_reveals_nothing_of_the_url(settings):
    key = url_key(SLACK)
    assert len(key) == 32 and "XXXX" not in key

    settings.SECRET_KEY = "another-secret-key-another-secret-key-another-secret-key"
    assert url_key(SLACK) != key


def test_the_url_is_stored_encrypted_under_the_first_key_and_read_back(settings):
    settings.WEBHOOK_SECRET_KEYS = [Fernet.generate_key().decode()]

    ciphertext = url_encrypt(SLACK)

    assert "hooks.slack.com" not in ciphertext and "XXXX" not in ciphertext
    assert url_decrypt(ciphertext) == SLACK
