"""Pausing and resuming an event type's messages for every recipient (scheduling.pauses)."""

from __future__ import annotations

import logging

from django.db import DEFAULT_DB_ALIAS, models, transaction
from django.utils import timezone

from runtime.sql import column_field
from scheduling.handlers import REGISTRY
from scheduling.models import EventTypePause

logger = logging.getLogger(__name__)


def event_type_pause(*, event_type: str, by: str) -> EventTypePause:
    """Hold back every recipient's messages of this type from now on; a type already paused stays as it is."""
    with transaction.atomic():
        pause = EventTypePause.objects.select_for_update().get(event_type=event_type)
        if not pause.paused:
            pause.paused_at, pause.paused_by = timezone.now(), by
            pause.resumed_at, pause.resumed_by = None, ""
            pause.save()
            logger.info(
                "%s paused the %s messages", by, event_type, extra={"operator": by, "event_type": event_type}
            )
    return pause


def event_type_resume(*, event_type: str, by: str) -> EventTypePause:
    """Send this type's messages again from the next occurrence whose send time has not passed.

    The occurrences whose time came while it was paused stay held back
    (scheduling.pauses): the scheduler fails them when it reaches them.
    """
    with transaction.atomic():
        pause = EventTypePause.objects.select_for_update().get(event_type=event_type)
        if pause.paused:
            # Never before the pause began, whatever the clocks of two web hosts say.
            assert pause.paused_at is not None  # paused: a pause has begun
            pause.resumed_at, pause.resumed_by = max(timezone.now(), pause.paused_at), by
            pause.save()
            logger.info(
                "%s resumed the %s messages", by, event_type, extra={"operator": by, "event_type": event_type}
            )
    return pause


def event_type_pauses_create_missing(
    *, model: type[models.Model] = EventTypePause, using: str = DEFAULT_DB_ALIAS
) -> None:
    """Give every registered event type without a row one, not paused (after every migrate, as message templates)."""
    migrated = {value for value, _label in column_field(model, "event_type").field.choices or ()}
    model._default_manager.using(using).bulk_create(
        [model(event_type=event_type) for event_type in REGISTRY if event_type in migrated],
        ignore_conflicts=True,
    )
