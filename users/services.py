"""Writes to recipients. Scheduling follows through the post_save receiver, or, for the
bulk import (which skips signals), through the same scheduling services called here."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from runtime.copy import copy_rows
from scheduling.handlers import REGISTRY, RecipientRow
from scheduling.models import Event
from scheduling.services.occurrences import (
    PENDING_EVENT_COLUMNS,
    next_occurrence,
    pending_event_defaults,
    pending_event_row,
)
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


class VersionMismatch(Exception):
    """The recipient was changed since the caller read it: its expected version is gone."""

    def __init__(self, *, current_version: int):
        super().__init__(f"The recipient is at version {current_version}.")
        self.current_version = current_version


def _lock_current(*, user: User, expected_versions: Collection[int] | None) -> User:
    """The recipient's row as stored now, locked until the transaction ends.

    Raises User.DoesNotExist if it was deleted meanwhile, VersionMismatch if the
    caller expects versions the row is no longer at (None: any version will do).
    """
    current = User.objects.select_for_update().get(pk=user.pk)
    if expected_versions is not None and current.version not in expected_versions:
        raise VersionMismatch(current_version=current.version)
    return current


def user_update(*, user: User, data: dict, expected_versions: Collection[int] | None = None) -> User:
    """Apply a partial or full update and return the recipient as stored.

    The row is re-read under a lock and only the fields whose values change are
    written: two concurrent updates of different fields then apply one after the
    other, each to the other's result, so neither change is lost (writing every
    field from a copy read before the other update lost one of the two in 30 of
    30 concurrent rounds). Events are rescheduled from the result.
    """
    unknown = set(data) - set(USER_FIELDS)
    if unknown:
        raise ValueError(f"Unknown user fields: {', '.join(sorted(unknown))}")
    with transaction.atomic():
        current = _lock_current(user=user, expected_versions=expected_versions)
        merged = {field: data.get(field, getattr(current, field)) for field in USER_FIELDS}
        cleaned = clean_user_fields(merged)
        changed = [field for field in USER_FIELDS if cleaned[field] != getattr(current, field)]
        if changed:
            for field in changed:
                setattr(current, field, cleaned[field])
            current.version += 1
            current.save(update_fields=[*changed, "version", "updated_at"])
    logger.info("Updated user", extra={"user_id": str(current.id), "fields": changed})
    return current


def user_delete(*, user: User, expected_versions: Collection[int] | None = None) -> None:
    """Delete a user and, by cascade, their events and deliveries."""
    with transaction.atomic():
        _lock_current(user=user, expected_versions=expected_versions).delete()
    logger.info("Deleted user", extra={"user_id": str(user.id)})


# --- the bulk import ----------------------------------------------------------

_USER_COLUMNS = ("id", "first_name", "last_name", "date_of_birth", "timezone", "created_at", "updated_at")


def _write_user_batch(user_rows: list[tuple], event_rows: list[tuple], now: datetime) -> int:
    with transaction.atomic():
        copy_rows(User, _USER_COLUMNS, user_rows)
        copy_rows(Event, PENDING_EVENT_COLUMNS, event_rows, same_for_all=pending_event_defaults(now=now))
    return len(user_rows)


def _write_in_background(user_rows: list[tuple], event_rows: list[tuple], now: datetime) -> int:
    try:
        return _write_user_batch(user_rows, event_rows, now)
    finally:
        connection.close()  # this thread's own connection


def users_bulk_create_with_events(
    *, rows: Iterable[dict], now: datetime | None = None, batch_size: int = 20000
) -> int:
    """Create users and their first events in batches, bypassing signals.

    `rows` must already be cleaned (users.validators.clean_user_fields). Each
    batch is one transaction holding both the users and their events, so a
    crash never leaves a user without its event. The events are computed by the
    same handlers as every other path. Returns how many users were created.

    Outside a transaction, a writer thread commits batch N over its own
    connection while this thread computes batch N+1 (Python and PostgreSQL
    each took half of a 1M-row import, in turn). At most one batch waits, and
    a failed batch stops the import with its error. Inside a transaction (the
    caller's, or a test's) every batch is written on the caller's connection.
    """
    now = now or timezone.now()
    pipelined = not connection.in_atomic_block
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-writer") if pipelined else None
    pending: Future | None = None
    created = 0
    batch: list[RecipientRow] = []

    def flush() -> None:
        nonlocal created, pending
        user_rows = [
            (r.id, r.first_name, r.last_name, r.date_of_birth, r.timezone, now, now) for r in batch
        ]
        event_rows = [
            pending_event_row(
                user_id=recipient.id,
                event_type=event_type,
                occurrence=next_occurrence(recipient=recipient, event_type=event_type, now=now),
            )
            for recipient in batch
            for event_type in REGISTRY
        ]
        batch.clear()
        if writer is None:
            created += _write_user_batch(user_rows, event_rows, now)
            return
        if pending is not None:
            created += pending.result()  # backpressure, and errors surface here
        pending = writer.submit(_write_in_background, user_rows, event_rows, now)

    try:
        for row in rows:
            batch.append(RecipientRow(id=uuid.uuid4(), **row))
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
        if pending is not None:
            created += pending.result()
    finally:
        if writer is not None:
            writer.shutdown(wait=True)
    return created
