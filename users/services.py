"""Writes to recipients. Scheduling follows through the post_save receiver."""

from __future__ import annotations

import logging

from django.db import transaction

from users.models import User
from users.validators import clean_user_fields

logger = logging.getLogger(__name__)

USER_FIELDS = ("first_name", "last_name", "date_of_birth", "timezone")


def user_create(*, first_name: str, last_name: str, date_of_birth, timezone: str) -> User:
    """Validate and create a user; its first event is created in the same transaction."""
    cleaned = clean_user_fields(
        {
            "first_name": first_name,
            "last_name": last_name,
            "date_of_birth": date_of_birth,
            "timezone": timezone,
        }
    )
    user = User(**cleaned)
    user.save(force_insert=True)
    logger.info("Created user", extra={"user_id": str(user.id)})
    return user


def user_update(*, user: User, data: dict) -> User:
    """Apply a partial or full update; events are rescheduled from the result."""
    unknown = set(data) - set(USER_FIELDS)
    if unknown:
        raise ValueError(f"Unknown user fields: {', '.join(sorted(unknown))}")
    merged = {field: data.get(field, getattr(user, field)) for field in USER_FIELDS}
    cleaned = clean_user_fields(merged)
    with transaction.atomic():
        for field, value in cleaned.items():
            setattr(user, field, value)
        user.save()
    logger.info("Updated user", extra={"user_id": str(user.id), "fields": sorted(data)})
    return user


def user_delete(*, user: User) -> None:
    """Delete a user and, by cascade, their events and deliveries."""
    user_id = user.id
    user.delete()
    logger.info("Deleted user", extra={"user_id": str(user_id)})
