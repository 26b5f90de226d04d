"""Receiver URLs are credentials: one spelling per receiver, a keyed identity, encrypted at rest, shown redacted.

A Slack (`/services/T…/B…/<token>`), Discord (`/api/webhooks/<id>/<token>`) or
Teams Workflows (`…?sig=<token>`) webhook URL is all it takes to post into
that channel: those services ignore our signing secret. So a receiver URL is
kept as the signing secrets are (delivery.credentials.signing_secrets):

* `url_normalise`: the one spelling of a receiver. Scheme and host lower-cased,
  the scheme's default port dropped, an empty path made `/`, the fragment
  (never sent) dropped; path and query are kept as given (a receiver may tell
  their case apart). A user name or password (`user:pass@`) is refused: it
  would be sent as Basic auth and end up wherever the URL is shown.
* `url_key`: the receiver's identity, a keyed hash (HMAC-SHA256, 128 bits) of
  the normalised URL under a key derived from DJANGO_SECRET_KEY. Destinations
  are unique on it, endpoints are found by it and deliveries name their
  endpoint by it, so no table needs the plain URL to tell receivers apart, and
  the hash reveals nothing a guess could confirm without the key.
* `url_encrypt`/`url_decrypt`: the URL itself, under WEBHOOK_SECRET_KEYS
  (MultiFernet), read back only to send and for an operator who may change
  the destination and asks to see it.
* `url_redact`: what may be shown of any URL whose kind is not known (log
  lines, errors): the scheme and host, never the path or query that may hold
  the token, e.g. `https://hooks.slack.com/…` (kinds.base.host_only).
  A destination's own `url_display` (lists, view-only accounts, API answers,
  exports) is its kind's `shown_url`: all but the part that kind knows is the
  credential, e.g. `https://hooks.slack.com/services/T…/B…/…`.
"""

from __future__ import annotations

import hashlib
import hmac
import urllib.parse
from functools import cache

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ValidationError

from delivery.credentials import signing_secrets as secret_store
from kinds.base import DEFAULT_PORTS, host_only

# Hex characters of the keyed hash kept: 128 bits, collision-free for any number of receivers.
KEY_CHARS = 32
USERINFO_REFUSED = (
    "A receiver URL may not carry a user name or password (user:password@host): it would be sent "
    "in the clear as Basic auth and shown wherever the URL is. Authenticate with the signing secret, "
    "or a token in the URL's path or query."
)
PORT_REFUSED = "A port from 1 to 65535 (such as https://example.com:8443/), or none for the scheme's own."


def url_normalise(url: str) -> str:
    """The one spelling of `url`; ValidationError (never echoing the URL) if it carries user info.

    The caller has checked that it is an http(s) URL (destination_url_validate).
    """
    parts = urllib.parse.urlsplit(url.strip())
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValidationError(USERINFO_REFUSED, code="userinfo")
    try:
        # urllib reads the port only when asked, and raises ValueError for one out of range (99999).
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise ValidationError(PORT_REFUSED, code="port")
    return _unsplit(parts)


def url_normalise_keeping_userinfo(url: str) -> str:
    """The one spelling of a URL stored before user info was refused (a migration's): the user info kept, so
    a receiver that needs it keeps receiving until an operator replaces the URL."""
    parts = urllib.parse.urlsplit(url.strip())
    userinfo, at, _ = parts.netloc.rpartition("@")
    return _unsplit(parts, userinfo=userinfo + at)


def _unsplit(parts: urllib.parse.SplitResult, *, userinfo: str = "") -> str:
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 literal
    port = parts.port
    netloc = userinfo + host + (f":{port}" if port is not None and port != DEFAULT_PORTS.get(scheme) else "")
    return urllib.parse.urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def url_key(url: str) -> str:
    """The identity of the receiver at the normalised `url`: a keyed hash, equal for equal URLs only."""
    return hmac.new(_key(settings.SECRET_KEY), url.encode(), hashlib.sha256).hexdigest()[:KEY_CHARS]


@cache
def _key(secret_key: str) -> bytes:
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"birthday-scheduler receiver url keys"
    ).derive(secret_key.encode())


def url_redact(url: str) -> str:
    """What may be shown of `url` to anyone, not knowing its kind: its scheme, host and port, never a user,
    path or query."""
    return host_only(url)


def url_encrypt(url: str) -> str:
    return secret_store.secret_encrypt(url)


def url_decrypt(ciphertext: str) -> str:
    """The URL; ImproperlyConfigured if no key of WEBHOOK_SECRET_KEYS opens it."""
    return secret_store.secret_decrypt(ciphertext)


class DecryptedUrls:
    """Receivers' URLs by endpoint key as last decrypted (held in memory only, to send): decrypted again only when
    the ciphertext changes (re-encrypted under a new key: destination_secrets_reencrypt), not on every read."""

    def __init__(self) -> None:
        self._known: dict[str, tuple[str, str]] = {}

    def of(self, *, key: str, ciphertext: str) -> str:
        known = self._known.get(key)
        if known is None or known[0] != ciphertext:
            known = self._known[key] = (ciphertext, url_decrypt(ciphertext))
        return known[1]
