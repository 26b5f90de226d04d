"""A destination's calendar feed: who may open it. The file itself is delivery.upcoming.ics.

The URL carries a token, a credential like a receiver URL: only its SHA-256 is stored
(CalendarFeed), so it is shown once when issued; issuing again replaces it, revoking deletes
it, and a request with any other token gets a 404 that says nothing more.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime

from django.db import transaction

from delivery.models import CalendarFeed, Destination


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def calendar_feed_issue(*, destination: Destination, operator: str, now: datetime) -> str:
    """Issue the destination's feed token, replacing any before it; return the token (shown this once)."""
    token = secrets.token_urlsafe(32)
    with transaction.atomic():
        CalendarFeed.objects.update_or_create(
            destination=destination,
            defaults={"token_sha256": _token_hash(token), "created_by": operator, "created_at": now},
        )
    return token


def calendar_feed_revoke(*, destination: Destination) -> bool:
    """Revoke the destination's feed; False if it had none."""
    deleted, _ = CalendarFeed.objects.filter(destination=destination).delete()
    return bool(deleted)


def calendar_feed_destination(*, token: str) -> Destination | None:
    """The destination whose feed this token opens; None for any other token."""
    feed = CalendarFeed.objects.select_related("destination").filter(token_sha256=_token_hash(token)).first()
    return feed.destination if feed is not None else None
