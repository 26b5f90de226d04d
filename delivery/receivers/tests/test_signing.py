"""Signing with several secrets at once: what a receiver in the middle of a rotation verifies."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from delivery.receivers.signing import WebhookSigner, parse_secrets

OLD = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
NEW = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
OTHER = "whsec_dGhpcyBpcyBub3QgdGhlIHNlY3JldCBpbiB1c2U="
BODY = '{"message": "Hey, Ada Lovelace it\'s your birthday"}'


def signed_now(secrets):
    return WebhookSigner(secrets).headers(msg_id="msg_1", body=BODY, sent_at=datetime.now(UTC))


def test_every_secret_in_force_verifies_the_same_request():
    headers = signed_now([NEW, OLD])

    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (OLD, NEW):
        assert Webhook(secret).verify(BODY, headers) == {"message": "Hey, Ada Lovelace it's your birthday"}


def test_a_secret_not_in_force_does_not_verify():
    with pytest.raises(WebhookVerificationError):
        Webhook(OTHER).verify(BODY, signed_now([NEW, OLD]))


def test_a_changed_body_verifies_with_no_secret():
    headers = signed_now([NEW, OLD])
    for secret in (OLD, NEW):
        with pytest.raises(WebhookVerificationError):
            Webhook(secret).verify(BODY.replace("Ada", "Eve"), headers)


def test_the_timestamp_is_the_sending_time():
    sent_at = datetime(2026, 6, 15, 9, 0, tzinfo=UTC)
    headers = WebhookSigner([OLD]).headers(msg_id="msg_1", body=BODY, sent_at=sent_at)

    assert headers["webhook-timestamp"] == str(int(sent_at.timestamp()))
    # A receiver refuses a stale timestamp: replaying an old request does not verify.
    with pytest.raises(WebhookVerificationError):
        Webhook(OLD).verify(
            BODY,
            WebhookSigner([OLD]).headers(
                msg_id="msg_1", body=BODY, sent_at=datetime.now(UTC) - timedelta(hours=1)
            ),
        )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", ()),
        ("   ", ()),
        (OLD, (OLD,)),
        (f"{NEW} {OLD}", (NEW, OLD)),
        (f"  {NEW}\n{OLD} ", (NEW, OLD)),
    ],
)
def test_secrets_are_separated_by_spaces(value, expected):
    assert parse_secrets(value) == expected


def test_a_secret_that_is_not_base64_is_refused_naming_its_position():
    with pytest.raises(ImproperlyConfigured, match="secret 2 of 2"):
        parse_secrets(f"{OLD} whsec_not*base64")


def test_the_same_secret_twice_is_refused():
    with pytest.raises(ImproperlyConfigured, match="twice"):
        parse_secrets(f"{OLD} {OLD}")
