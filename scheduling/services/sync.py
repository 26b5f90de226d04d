"""Keeping each recipient's PENDING events in step with their data."""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import cast

from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Model, OuterRef
from django.utils import timezone

from runtime.wakeup import SCHEDULER_CHANNEL, notify
from scheduling.exceptions import InvalidStateTransition, OptimisticLockError
from scheduling.handlers import REGISTRY, Occurrence, Recipient
from scheduling.models import Event, EventStatus
from scheduling.pauses import PauseSpan
from scheduling.selectors import deleted_occurrence_latest, event_type_pauses
from scheduling.services.occurrences import (
    StoredRecipient,
    first_occurrence,
    pending_event,
    scheduled_occurrence,
)
from scheduling.times import load_timezone

logger = logging.getLogger(__name__)

# How often a user save retries reconciling its events after losing a race to
# the scheduler (each retry re-reads the rows the winner committed).
_SYNC_ATTEMPTS = 5
# Events due sooner than this after a write wake the scheduler at once.
_WAKE_HORIZON = timedelta(seconds=60)
# Users repaired per call of events_create_missing.
RECONCILE_CHUNK = 1000


def _wake_scheduler_if_due_soon(target: datetime) -> None:
    # The scheduler sleeps until the earliest target it knew of, and never longer
    # than a second or so; only an event due before it next looks needs a wake-up.
    if target <= timezone.now() + _WAKE_HORIZON:
        notify(SCHEDULER_CHANNEL, target.isoformat())


def _event_insert(*, user: Recipient, event_type: str, occurrence: Occurrence, now: datetime) -> Event:
    event = pending_event(user_id=user.id, event_type=event_type, occurrence=occurrence, now=now)
    event.save(force_insert=True)
    _wake_scheduler_if_due_soon(event.target_timestamp_utc)
    return event


def event_create_next(*, user: StoredRecipient, event_type: str, now: datetime | None = None) -> Event | None:
    """Create the user's next PENDING event of this type from their current data.

    None if they have no occurrence of this type (no anniversary date).
    """
    now = now or timezone.now()
    occurrence = scheduled_occurrence(recipient=user, event_type=event_type, now=now)
    if occurrence is None:
        return None
    return _event_insert(user=user, event_type=event_type, occurrence=occurrence, now=now)


def events_create_first(*, user: StoredRecipient, now: datetime | None = None) -> list[Event]:
    """A new user's first PENDING events, one per type they have occurrences of.

    Each the first occurrence whose send time is at most the type's catch-up
    window ago (due at once if it has passed). A new user has no history; a
    deleted one who had the same external id may (deleted_occurrence_latest).
    """
    now = now or timezone.now()
    events = []
    for event_type in REGISTRY:
        after_date = (
            deleted_occurrence_latest(external_id=user.external_id, event_type=event_type, now=now)
            if user.external_id is not None
            else None
        )
        occurrence = first_occurrence(recipient=user, event_type=event_type, now=now, after_date=after_date)
        if occurrence is not None:
            events.append(_event_insert(user=user, event_type=event_type, occurrence=occurrence, now=now))
    return events


def event_reschedule(*, event: Event, occurrence: Occurrence) -> Event:
    """Move a PENDING event to a new instant, keeping its occurrence date and key.

    Not a change of status, so not a transition: the same conditional UPDATE
    on (id, PENDING, version), bumping the version, so a scheduler holding the
    old version cannot claim it afterwards.
    """
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
    updated = Event.objects.filter(id=event.id, status=EventStatus.PENDING, version=event.version).update(
        version=F("version") + 1, updated_at=timezone.now(), **changes
    )
    if updated != 1:
        raise OptimisticLockError(
            f"Event {event.id} was changed by someone else: expected status PENDING "
            f"at version {event.version}."
        )
    event.version += 1
    for field, value in changes.items():
        setattr(event, field, value)
    _wake_scheduler_if_due_soon(occurrence.target_utc)
    return event


def event_deliver_now_refusal(*, event: Event, now: datetime) -> str:
    """Why "deliver now" would refuse `event` ("" if it would not): the console's confirmation shows it first."""
    if event.status != EventStatus.PENDING:
        return (
            f"Only PENDING events can be delivered now; event {event.id} (version {event.version}) is "
            f"{event.status}."
        )
    today = now.astimezone(load_timezone(event.target_timezone)).date()
    if event.occurrence_date != today:
        return (
            f"Event {event.id} is the occurrence of {event.occurrence_date:%Y-%m-%d}, not of today "
            f"({today:%Y-%m-%d} in {event.target_timezone}): sending it now would send that day's greeting "
            "today and nothing on the day. Only an occurrence due today can be delivered early."
        )
    if event.user.paused:
        return (
            f"The recipient of event {event.id} is paused: the scheduler would fail this occurrence unsent. "
            "Resume the recipient first."
        )
    if event_type_pauses().get(event.event_type, PauseSpan(None, None)).active:
        return (
            f"{event.get_event_type_display()} messages are paused for everyone: the scheduler would fail "
            "this occurrence unsent. Resume the event type first."
        )
    return ""


def event_deliver_now(*, event: Event, operator: str, now: datetime | None = None) -> Event:
    """Operator action: send today's occurrence now instead of at its send time (same occurrence and key).

    Only the occurrence whose local date is today in the recipient's zone: any
    other would be sent on the wrong day and the real day would get nothing,
    since each occurrence is sent once (an operator once used up a 2028
    birthday this way). Refused while the recipient or the event type is
    paused: the claim would fail the occurrence unsent and move on a year.
    """
    now = now or timezone.now()
    refusal = event_deliver_now_refusal(event=event, now=now)
    if refusal:
        raise InvalidStateTransition(refusal)
    zone = load_timezone(event.target_timezone)
    if event.target_timestamp_utc <= now:
        # Already due: the scheduler claims it at its next look; moving it changes nothing.
        return event
    event_reschedule(
        event=event,
        occurrence=Occurrence(
            occurrence_date=event.occurrence_date,
            target_utc=now,
            target_local=now.astimezone(zone),
            timezone_name=event.target_timezone,
        ),
    )
    logger.info(
        "Operator %s made today's event due now",
        operator,
        extra={"operator": operator, "event_id": str(event.id), "idempotency_key": event.idempotency_key},
    )
    return event


def _event_discard_pending(*, event: Event) -> None:
    # A pending event that no longer follows from the user's data was never
    # sent and never will be; it is replaced, not kept as history.
    deleted, _ = Event.objects.filter(id=event.id, status=EventStatus.PENDING, version=event.version).delete()
    if not deleted:
        raise OptimisticLockError(
            f"Event {event.id} was changed by someone else: expected status PENDING "
            f"at version {event.version}."
        )


class SyncChange(enum.StrEnum):
    """What the sync did to one of a user's events."""

    CREATED = "created"
    RESCHEDULED = "rescheduled"
    REPLACED = "replaced"
    REMOVED = "removed"
    # PROCESSING, or lost every race with the scheduler: left as it was.
    SKIPPED = "skipped"


def _sync_one_type(*, user: StoredRecipient, event_type: str, now: datetime) -> Iterator[SyncChange]:
    for processing in Event.objects.filter(
        user_id=user.id, event_type=event_type, status=EventStatus.PROCESSING
    ).only("id"):
        # Its delivery is already under way with the data it was claimed with.
        logger.warning(
            "Event is PROCESSING; leaving it alone",
            extra={"event_id": str(processing.id), "user_id": str(user.id)},
        )
        yield SyncChange.SKIPPED

    for _attempt in range(_SYNC_ATTEMPTS):
        try:
            change = _pending_follow(user=user, event_type=event_type, now=now)
        except (OptimisticLockError, IntegrityError) as exc:
            # The scheduler claimed the event (or created the next one) between
            # our read and our write. Read again: what it committed is now
            # visible, and the next occurrence must follow the new data.
            logger.info(
                "Lost a race while rescheduling; reading again",
                extra={"user_id": str(user.id), "error": str(exc)},
            )
            continue
        if change is not None:
            yield change
        return
    logger.warning(
        "Gave up rescheduling after repeated conflicts",
        extra={"user_id": str(user.id), "event_type": event_type},
    )
    yield SyncChange.SKIPPED


def _pending_follow(*, user: StoredRecipient, event_type: str, now: datetime) -> SyncChange | None:
    """Make the user's PENDING event of the type follow from their data; what changed (None: nothing).

    OptimisticLockError or IntegrityError if the scheduler wrote meanwhile: the caller reads again.
    """
    pending = Event.objects.filter(user_id=user.id, event_type=event_type, status=EventStatus.PENDING).first()
    occurrence = scheduled_occurrence(
        recipient=user,
        event_type=event_type,
        now=now,
        pending_date=pending.occurrence_date if pending else None,
    )
    if occurrence is None:
        # No occurrence of this type any more (the anniversary date was
        # cleared): the pending one is discarded, as a replaced one is.
        if pending is None:
            return None
        _event_discard_pending(event=pending)
        return SyncChange.REMOVED
    if pending is None:
        with transaction.atomic():
            _event_insert(user=user, event_type=event_type, occurrence=occurrence, now=now)
        return SyncChange.CREATED
    if occurrence.occurrence_date != pending.occurrence_date:
        with transaction.atomic():
            _event_discard_pending(event=pending)
            _event_insert(user=user, event_type=event_type, occurrence=occurrence, now=now)
        return SyncChange.REPLACED
    if pending.target_timezone != user.timezone or (
        pending.target_timestamp_utc > now and pending.target_timestamp_utc != occurrence.target_utc
    ):
        # Same occurrence, so the same key; a new zone or a new send time
        # moves the instant. An event already due keeps its instant unless
        # the zone changed: it is an operator's "deliver now", or one the
        # scheduler has yet to claim, and is sent as it is.
        event_reschedule(event=pending, occurrence=occurrence)
        return SyncChange.RESCHEDULED
    return None


def event_sync_for_user(*, user: StoredRecipient, now: datetime | None = None) -> Counter[SyncChange]:
    """Make the user's PENDING events follow from their current data.

    The occurrence comes from scheduled_occurrence: the next one after the
    last handled (sent, failed or being sent) whose send time has not passed,
    or the pending one if only its send time has passed. No pending event:
    create one. The pending occurrence is not that one (the date of birth
    changed, or a new zone puts an unsent birthday still ahead): replace it.
    No occurrence of the type at all (the anniversary date was cleared):
    remove the pending one.
    Same occurrence in another zone: keep the date and key, move the instant;
    if that instant has passed the event is simply due. Names are read at
    delivery, so a rename changes nothing here. PROCESSING events are never
    touched.
    """
    now = now or timezone.now()
    result = Counter(
        change
        for event_type in REGISTRY
        for change in _sync_one_type(user=user, event_type=event_type, now=now)
    )
    if result:
        logger.info(
            "Synchronised events for user: %s created, %s rescheduled, %s replaced, %s removed, %s skipped",
            *(result[change] for change in SyncChange),
            extra={"user_id": str(user.id)},
        )
    return result


def _recipients() -> type[Model]:
    # The recipient model, as the event's foreign key names it: scheduling
    # reads recipients but does not import the app that owns them.
    model = Event._meta.get_field("user").related_model
    assert isinstance(model, type)  # a foreign key's model, resolved when the apps were loaded
    return model


def events_create_missing(*, now: datetime | None = None, limit: int = RECONCILE_CHUNK) -> int:
    """Per event type, give up to `limit` users the PENDING event of it they lack (rows from
    signal-less paths), among the users the type applies to.

    Returns how many were created; a full chunk means there may be more.
    """
    now = now or timezone.now()
    created = 0
    for event_type, handler in REGISTRY.items():
        has_pending = Event.objects.filter(
            user=OuterRef("pk"), event_type=event_type, status=EventStatus.PENDING
        )
        # Only among the recipients the type applies to: the others never get
        # one, and would fill every chunk.
        # In key order, not the recipients' default (created_at): PostgreSQL then
        # walks the users' and the pending events' key indexes side by side (a
        # merge anti-join) instead of probing the events' index once per
        # recipient: one process then does in a fraction of the time what the
        # probes kept several busy with. The pass runs every
        # SCHEDULER_RECONCILE_INTERVAL in every scheduler, nearly always with
        # nothing to repair, so that is the case to make cheap.
        orphans = (
            _recipients()
            ._default_manager.filter(handler.applies_to, ~Exists(has_pending))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        for user_id in orphans[:limit]:
            try:
                with transaction.atomic():
                    # Read under the lock a user edit takes first: an edit made
                    # meanwhile (a cleared anniversary date) is then either what
                    # this follows, or sees this event and follows it.
                    user = _recipients()._default_manager.select_for_update().filter(pk=user_id).first()
                    # users.User, which has a StoredRecipient's fields (its type is not
                    # importable here: see _recipients).
                    if user is not None and event_create_next(
                        user=cast(StoredRecipient, user), event_type=event_type, now=now
                    ):
                        created += 1
            except IntegrityError:
                # Created concurrently (by a user save or another scheduler).
                continue
    return created
