"""Which ESPs' tracking webhooks the product takes (users/esp/), and what must verify each.

Read by the settings, which refuse to start with an ESP enabled that nothing would verify:
anymail itself only warns, and takes anyone's post as the ESP's.
"""

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

# Each ESP (its path segment under /esp/) and the ANYMAIL settings of which one must be set:
# basic auth (WEBHOOK_SECRET) is the only verification Amazon SES's SNS posts and Postmark's
# have in anymail; SendGrid signs its posts (ECDSA) when its signed event webhook is on; Mailgun
# signs every post (HMAC with the account's webhook signing key).
ESP_WEBHOOK_VERIFIED_BY: dict[str, tuple[str, ...]] = {
    "amazon_ses": ("WEBHOOK_SECRET",),
    "postmark": ("WEBHOOK_SECRET",),
    "sendgrid": ("WEBHOOK_SECRET", "SENDGRID_TRACKING_WEBHOOK_VERIFICATION_KEY"),
    "mailgun": ("MAILGUN_WEBHOOK_SIGNING_KEY",),
}


def esp_webhooks_check(*, enabled: list[str], anymail: Mapping[str, object]) -> None:
    """Raise ImproperlyConfigured, naming the setting, unless every enabled ESP is known and verified."""
    for esp in enabled:
        if esp not in ESP_WEBHOOK_VERIFIED_BY:
            raise ImproperlyConfigured(
                f"ESP_WEBHOOKS: {esp!r} is not one of {', '.join(ESP_WEBHOOK_VERIFIED_BY)}."
            )
        needed = ESP_WEBHOOK_VERIFIED_BY[esp]
        if not any(anymail.get(name) for name in needed):
            raise ImproperlyConfigured(
                f"ESP_WEBHOOKS: {esp} is enabled, but nothing verifies its posts: set "
                f"{' or '.join(f'ESP_{name}' for name in needed)}."
            )
