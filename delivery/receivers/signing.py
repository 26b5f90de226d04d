"""Standard Webhooks signatures, one for each secret in force.

`WEBHOOK_SECRET` holds one or more secrets separated by spaces. Every request
carries a signature made with each of them, space-separated in one
`webhook-signature` header as the Standard Webhooks specification allows, so a
receiver verifying with any one of the secrets accepts it. That is what makes a
rotation free of downtime: the new secret is added beside the old, the receiver
moves over at its own pace, then the old one is removed (docs/operations.md,
"Rotating the signing secret").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.core.exceptions import ImproperlyConfigured
from standardwebhooks.webhooks import Webhook


def parse_secrets(value: str) -> tuple[str, ...]:
    """The secrets named by WEBHOOK_SECRET, in order; none when it is empty.

    Raises ImproperlyConfigured naming the position of a secret the signing
    library cannot use (not base64 after its `whsec_` prefix), and for a secret
    given twice, which would only add a duplicate signature to every request.
    """
    secrets = tuple(value.split())
    for position, secret in enumerate(secrets, start=1):
        try:
            Webhook(secret)
        except Exception as exc:  # the library raises binascii.Error or ValueError
            raise ImproperlyConfigured(
                f"WEBHOOK_SECRET: secret {position} of {len(secrets)} is not a Standard Webhooks secret "
                "(whsec_ followed by base64)"
            ) from exc
    if len(set(secrets)) != len(secrets):
        raise ImproperlyConfigured("WEBHOOK_SECRET: the same secret is given twice")
    return secrets


class WebhookSigner:
    """Makes the Standard Webhooks headers of one request, signed with every secret."""

    def __init__(self, secrets: Sequence[str]) -> None:
        if not secrets:
            raise ValueError("a signer needs at least one secret")
        self._webhooks = tuple(Webhook(secret) for secret in secrets)

    def headers(self, *, msg_id: str, body: str, sent_at: datetime) -> dict[str, str]:
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(sent_at.timestamp())),
            "webhook-signature": " ".join(webhook.sign(msg_id, sent_at, body) for webhook in self._webhooks),
        }
