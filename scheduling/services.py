"""Writes to events: creation, the state machine, rescheduling and the bulk path."""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import date, datetime
from typing import TYPE_CHECKING, Iterable

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef
from django.utils import timezone

from scheduling.exceptions import InvalidStateTransition, OptimisticLockError
from scheduling.handlers import REGISTRY, Occurrence, get_handler, local_send_instant
from scheduling.models import Event, EventStatus

if TYPE_CHECKING:
    from users.models import User

logger = logging.getLogger(__name__)

# The state machine. Every other move is refused with InvalidStateTransition.
ALLOWED_TRANSITIONS: frozenset[tuple[str, str]] = frozenset(
    {
        (EventStatus.PENDING, EventStatus.PROCESSING),
        (EventStatus.PROCESSING, EventStatus.COMPLETED),
        (EventStatus.PROCESSING, EventStatus.FAILED),
    }
)

# How often a user save retries reconciling its events after losing a race to
# the scheduler (each retry re-reads the rows the winner committed).
_SYNC_ATTEMPTS = 5


def idempotency_key_for(*, user_id: uuid.UUID, event_type: str, occurrence_date: date) -> str:
    """`event-` + 16 hex of SHA-256 over (user, type, local date): stable across zone edits."""
    material = f"{user_id}:{event_type}:{occurrence_date.isoformat()}"
    return "event-" + hashlib.sha256(material.encode()).hexdigest()[:16]


# --- the state machine -------------------------------------------------------


def _event_transition(*, event: Event, source: str, target: str, **changes) -> Event:
    """Move `event` from `source` to `target` with one conditional UPDATE.

    The UPDATE matches on id, expected status and version and bumps the version,
    so of two processes holding the same version only one can win.
    """
    if event.status != source or (source, target) not in ALLOWED_TRANSITIONS:
        raise InvalidStateTransition(
            f"Event {event.id} (version {event.version}) cannot move from "
            f"{event.status} to {target}."
        )
    now = timezone.now()
    updated = Event.objects.filter(id=event.id, status=source, version=event.version).update(
        status=target, version=F("version") + 1, updated_at=now, **changes
    )
    if updated != 1:
        raise OptimisticLockError(
            f"Event {event.id} was changed by someone else: expected status {source} "
            f"at version {event.version}."
        )
    event.status = target
    event.version += 1
    event.updated_at = now
    for field, value in changes.items():
        setattr(event, field, value)
    return event


def event_start_processing(*, event: Event, delivery_payload: dict | None = None) -> Event:
    """PENDING -> PROCESSING: the scheduler has claimed the event."""
    return _event_transition(
        event=event,
        source=EventStatus.PENDING,
        target=EventStatus.PROCESSING,
        delivery_payload=delivery_payload,
    )


def event_complete(*, event: Event, executed_at: datetime | None = None) -> Event:
    """PROCESSING -> COMPLETED: the receiver accepted the message."""
    return _event_transition(
        event=event,
        source=EventStatus.PROCESSING,
        target=EventStatus.COMPLETED,
        executed_at=executed_at or timezone.now(),
        failure_reason="",
    )


def event_fail(*, event: Event, reason: str) -> Event:
    """PROCESSING -> FAILED: too late to send, or the delivery was given up."""
    return _event_transition(
        event=event,
        source=EventStatus.PROCESSING,
        target=EventStatus.FAILED,
        failure_reason=reason,
    )


# --- creating and rescheduling -----------------------------------------------


def _last_handled_occurrence(*, user_id: uuid.UUID, event_type: str) -> date | None:
    # Occurrences already claimed, sent or failed are never scheduled again:
    # the next one must come after the latest of them.
    return (
        Event.objects.filter(user_id=user_id, event_type=event_type)
        .exclude(status=EventStatus.PENDING)
        .aggregate(latest=Max("occurrence_date"))["latest"]
    )


def _event_from_occurrence(*, user: User, event_type: str, occurrence: Occurrence) -> Event:
    return Event(
        user=user,
        event_type=event_type,
        status=EventStatus.PENDING,
        occurrence_date=occurrence.occurrence_date,
        target_timestamp_utc=occurrence.target_utc,
        target_timestamp_local=occurrence.target_local.isoformat(),
        target_timezone=occurrence.timezone_name,
        idempotency_key=idempotency_key_for(
            user_id=user.id, event_type=event_type, occurrence_date=occurrence.occurrence_date
        ),
    )


def event_create_next(*, user: User, event_type: str, now: datetime | None = None) -> Event:
    """Create the user's next PENDING event of this type from their current data."""
    handler = get_handler(event_type)
    occurrence = handler.next_occurrence(
        user=user,
        now=now or timezone.now(),
        after_date=_last_handled_occurrence(user_id=user.id, event_type=event_type),
    )
    event = _event_from_occurrence(user=user, event_type=event_type, occurrence=occurrence)
    event.save(force_insert=True)
    return event


def event_reschedule(*, event: Event, occurrence: Occurrence) -> Event:
    """Move a PENDING event to a new instant, keeping its occurrence date and key."""
    if event.status != EventStatus.PENDING:
        raise InvalidStateTransition(
            f"Event {event.id} (version {event.version}) is {event.status}; "
            "only PENDING events can be rescheduled."
        )
    changes = {
        "target_timestamp_utc": occurrence.target_utc,
        "target_timestamp_local": occurrence.target_local.isoformat(),
        "target_timezone": occurrence.timezone_name,
    }
    updated = Event.objects.filter(
        id=event.id, status=EventStatus.PENDING, version=event.version
    ).update(version=F("version") + 1, updated_at=timezone.now(), **changes)
    if updated != 1:
        raise OptimisticLockError(
            f"Event {event.id} was changed by someone else: expected status PENDING "
            f"at version {event.version}."
        )
    event.version += 1
    for field, value in changes.items():
        setattr(event, field, value)
    return event


def _event_discard_pending(*, event: Event) -> None:
    # A pending event that no longer follows from the user's data was never
    # sent and never will be; it is replaced, not kept as history.
    deleted, _ = Event.objects.filter(
        id=event.id, status=EventStatus.PENDING, version=event.version
    ).delete()
    if not deleted:
        raise OptimisticLockError(
            f"Event {event.id} was changed by someone else: expected status PENDING "
            f"at version {event.version}."
        )


@dataclass
class SyncResult:
    created: int = 0
    rescheduled: int = 0
    replaced: int = 0
    skipped: int = 0

    @property
    def changed(self) -> int:
        return self.created + self.rescheduled + self.replaced


def _sync_one_type(*, user: User, event_type: str, now: datetime, result: SyncResult) -> None:
    handler = get_handler(event_type)
    for processing in Event.objects.filter(
        user=user, event_type=event_type, status=EventStatus.PROCESSING
    ).only("id"):
        # Its delivery is already under way with the data it was claimed with.
        logger.warning(
            "Event is PROCESSING; leaving it alone",
            extra={"event_id": str(processing.id), "user_id": str(user.id)},
        )
        result.skipped += 1

    for _attempt in range(_SYNC_ATTEMPTS):
        pending = Event.objects.filter(
            user=user, event_type=event_type, status=EventStatus.PENDING
        ).first()
        try:
            if pending is None:
                with transaction.atomic():
                    event_create_next(user=user, event_type=event_type, now=now)
                result.created += 1
            elif not handler.occurrence_matches(
                user=user, occurrence_date=pending.occurrence_date
            ):
                with transaction.atomic():
                    _event_discard_pending(event=pending)
                    event_create_next(user=user, event_type=event_type, now=now)
                result.replaced += 1
            else:
                expected = local_send_instant(pending.occurrence_date, user.timezone)
                if (
                    expected.target_utc != pending.target_timestamp_utc
                    or expected.timezone_name != pending.target_timezone
                ):
                    event_reschedule(event=pending, occurrence=expected)
                    result.rescheduled += 1
            return
        except (OptimisticLockError, IntegrityError) as exc:
            # The scheduler claimed the event (or created the next one) between
            # our read and our write. Read again: what it committed is now
            # visible, and the next occurrence must follow the new data.
            logger.info(
                "Lost a race while rescheduling; reading again",
                extra={"user_id": str(user.id), "error": str(exc)},
            )
    logger.warning(
        "Gave up rescheduling after repeated conflicts",
        extra={"user_id": str(user.id), "event_type": event_type},
    )
    result.skipped += 1


def event_sync_for_user(*, user: User, now: datetime | None = None) -> SyncResult:
    """Make the user's PENDING events follow from their current data.

    No pending event: create one. The date of birth changed so the pending
    occurrence is no longer a birthday: replace it. Only the zone (or the send
    time) changed: keep the occurrence date and key, move the instant; if that
    instant has passed the event is simply due. Names are read at delivery, so a
    rename changes nothing here. PROCESSING events are never touched.
    """
    now = now or timezone.now()
    result = SyncResult()
    for event_type in REGISTRY:
        _sync_one_type(user=user, event_type=event_type, now=now, result=result)
    if result.changed or result.skipped:
        logger.info(
            "Synchronised events for user: %s created, %s rescheduled, %s replaced, %s skipped",
            result.created,
            result.rescheduled,
            result.replaced,
            result.skipped,
            extra={"user_id": str(user.id)},
        )
    return result


# --- the bulk path -------------------------------------------------------------


def users_bulk_create_with_events(
    *, rows: Iterable[dict], now: datetime | None = None, batch_size: int = 2000
) -> int:
    """Create users and their first events in batches, bypassing signals.

    `rows` must already be cleaned (users.validators.clean_user_fields). Each
    batch is one transaction holding both the users and their events, so a
    crash never leaves a user without its event. Returns how many were created.
    """
    from users.models import User

    now = now or timezone.now()
    created = 0
    batch: list[User] = []

    def flush() -> None:
        nonlocal created
        events = [
            _event_from_occurrence(
                user=user,
                event_type=event_type,
                occurrence=handler.next_occurrence(user=user, now=now),
            )
            for user in batch
            for event_type, handler in REGISTRY.items()
        ]
        with transaction.atomic():
            User.objects.bulk_create(batch, batch_size=batch_size)
            Event.objects.bulk_create(events, batch_size=batch_size)
        created += len(batch)
        batch.clear()

    for row in rows:
        batch.append(User(id=uuid.uuid4(), **row))
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return created


def events_create_missing(*, now: datetime | None = None, limit: int = 1000) -> int:
    """Give every user without a PENDING event one (rows created by signal-less paths)."""
    from users.models import User

    now = now or timezone.now()
    created = 0
    for event_type in REGISTRY:
        has_pending = Event.objects.filter(
            user=OuterRef("pk"), event_type=event_type, status=EventStatus.PENDING
        )
        orphans = User.objects.filter(~Exists(has_pending))[:limit]
        for user in orphans:
            try:
                with transaction.atomic():
                    event_create_next(user=user, event_type=event_type, now=now)
                created += 1
            except IntegrityError:
                # Created concurrently (by a user save or another scheduler).
                continue
    return created
