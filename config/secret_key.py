from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# The key this repository once shipped as its default: public, so never acceptable.
PUBLISHED_KEYS = frozenset({"insecure-local-development-key-change-me-in-production"})
# Django's own deployment check asks for the same: 50 characters, 5 distinct.
MINIMUM_LENGTH = 50
MINIMUM_DISTINCT_CHARACTERS = 5


def check_secret_key(key: str, *, source: Path) -> None:
    """Refuse, in one line, a secret key that would let others forge sessions."""
    how = (
        "set DJANGO_SECRET_KEY (or write one to DJANGO_SECRET_KEY_FILE, now "
        f"{source}) to a random string, e.g. from: python -c "
        "'import secrets; print(secrets.token_urlsafe(50))'"
    )
    if not key:
        problem = "no secret key is set"
    elif key in PUBLISHED_KEYS or key.startswith("django-insecure"):
        problem = "the secret key is a published default"
    elif len(key) < MINIMUM_LENGTH or len(set(key)) < MINIMUM_DISTINCT_CHARACTERS:
        problem = (
            f"the secret key is too weak ({len(key)} characters, {len(set(key))} distinct; "
            f"at least {MINIMUM_LENGTH} and {MINIMUM_DISTINCT_CHARACTERS} needed)"
        )
    else:
        return
    raise ImproperlyConfigured(f"Refusing to start with DJANGO_DEBUG off: {problem}; {how}.")
