"""Destinations' signing secrets: made or checked, masked for display, encrypted at rest.

A signing secret is a Standard Webhooks secret, `whsec_` followed by the base64 of
its key bytes. The database only ever holds it encrypted with MultiFernet under
WEBHOOK_SECRET_KEYS (the first key encrypts, every key decrypts, so the key can
rotate: `MultiFernet.rotate` re-encrypts under the first); without that setting,
under one key derived from DJANGO_SECRET_KEY with HKDF, which also stays last in the
list to decrypt what was stored before explicit keys were set. What people see is the
hint: the prefix and the first characters of the key, never enough to sign.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError

PREFIX = "whsec_"
GENERATED_BYTES = 32
# Standard Webhooks asks for 24 to 64 bytes of key.
MIN_BYTES, MAX_BYTES = 24, 64
# Characters of the key shown after the prefix in a hint.
HINT_CHARS = 4


def secret_generate() -> str:
    """A new signing secret from the operating system's random source."""
    return PREFIX + base64.b64encode(secrets.token_bytes(GENERATED_BYTES)).decode()


def secret_check(value: str) -> str:
    """The secret an operator supplied, if it is one; ValidationError (never echoing it) if not."""
    value = value.strip()
    if not value.startswith(PREFIX):
        raise ValidationError(f"A signing secret starts with {PREFIX}.", code="invalid")
    try:
        key = base64.b64decode(value.removeprefix(PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError(f"A signing secret is {PREFIX} followed by base64.", code="invalid") from None
    if not MIN_BYTES <= len(key) <= MAX_BYTES:
        raise ValidationError(
            f"A signing secret's key is {MIN_BYTES} to {MAX_BYTES} bytes; this one has {len(key)}.",
            code="invalid",
        )
    return value


def secret_key(value: str) -> bytes:
    """The key a secret signs with: two spellings of one key (base64's unused bits) are one secret."""
    return base64.b64decode(value.removeprefix(PREFIX))


def secret_hint(value: str) -> str:
    """What may be shown of a secret: enough to tell two apart, far too little to sign."""
    return value[: len(PREFIX) + HINT_CHARS] + "…"


def secret_encrypt(value: str) -> str:
    return _box().encrypt(value.encode()).decode()


def secret_decrypt(ciphertext: str) -> str:
    """The secret; ImproperlyConfigured if no key of WEBHOOK_SECRET_KEYS opens it (a key was dropped too soon)."""
    try:
        return _box().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise ImproperlyConfigured(
            "A destination's signing secret cannot be decrypted with any key of WEBHOOK_SECRET_KEYS."
        ) from None


def secret_reencrypt(ciphertext: str) -> str:
    """The same secret encrypted under the first key (after a new key was put first)."""
    return _box().rotate(ciphertext.encode()).decode()


def _box() -> MultiFernet:
    return _box_for(tuple(settings.WEBHOOK_SECRET_KEYS), settings.SECRET_KEY)


@cache
def _box_for(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"birthday-scheduler destination secrets"
    )
    derived_key = Fernet(base64.urlsafe_b64encode(derived.derive(secret_key.encode())))
    try:
        explicit = [Fernet(key) for key in keys]
    except (ValueError, binascii.Error):
        raise ImproperlyConfigured(
            "WEBHOOK_SECRET_KEYS: every key must be a Fernet key (Fernet.generate_key())."
        ) from None
    # The derived key last: it still opens what was stored before explicit keys were set,
    # so moving to them is "set the keys, re-encrypt", and it never encrypts once they are.
    return MultiFernet([*explicit, derived_key])
