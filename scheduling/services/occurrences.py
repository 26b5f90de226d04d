"""An event's next occurrence for a recipient, and the key that names it."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from django.conf import settings
from django.db.models import Max

from runtime.ids import uuid7
from scheduling.handlers import REGISTRY, Occurrence, Recipient, get_handler, local_send_instant
from scheduling.models import Event, EventStatus
from scheduling.selectors import deleted_occurrence_latest


class StoredRecipient(Recipient, Protocol):
    """A recipient as the paths that edit one have it: with the client's own id, if any.

    A deleted recipient's handled occurrences are remembered by it
    (scheduling.services.deleted_recipients).
    """

    @property
    def external_id(self) -> str | None: ...


def idempotency_key_for(*, user_id: uuid.UUID, event_type: str, occurrence_date: date) -> str:
    """`event-` + 16 hex of SHA-256 over (user, type, local date): stable across zone edits."""
    material = f"{user_id}:{event_type}:{occurrence_date.isoformat()}"
    return "event-" + hashlib.sha256(material.encode()).hexdigest()[:16]


def catch_up_window(*, event_type: str) -> timedelta:
    """How long after an occurrence's send time a new or edited recipient still gets it (0: not at all).

    EVENT_CATCH_UP_WINDOW, or the type's own in EVENT_CATCH_UP_WINDOW_BY_TYPE, and
    never more than EVENT_MAX_LATENESS: an occurrence caught up later than that
    would only be failed as too late when claimed.
    """
    window = settings.EVENT_CATCH_UP_WINDOW_BY_TYPE.get(event_type, settings.EVENT_CATCH_UP_WINDOW)
    return min(window, settings.EVENT_MAX_LATENESS)


def last_handled_occurrence(*, recipient: StoredRecipient, event_type: str, now: datetime) -> date | None:
    """The latest occurrence already claimed, sent or failed: the next one must come after it.

    The recipient's own, or one handled for a deleted recipient who had their
    external id and whose occurrence could still be caught up: deleted and
    created again, the recipient is not greeted twice.
    """
    own: date | None = (
        Event.objects.filter(user_id=recipient.id, event_type=event_type)
        .exclude(status=EventStatus.PENDING)
        .aggregate(latest=Max("occurrence_date"))["latest"]
    )
    if recipient.external_id is None:
        return own
    deleted = deleted_occurrence_latest(external_id=recipient.external_id, event_type=event_type, now=now)
    return max(filter(None, (own, deleted)), default=None)


def next_occurrence(
    *, recipient: Recipient, event_type: str, now: datetime, after_date: date | None = None
) -> Occurrence | None:
    """The first occurrence whose send time has not passed, after `after_date` if given.

    None if the recipient has no occurrence of this type (no anniversary date).
    """
    return get_handler(event_type).next_occurrence(user=recipient, now=now, after_date=after_date)


def first_occurrence(
    *, recipient: Recipient, event_type: str, now: datetime, after_date: date | None = None
) -> Occurrence | None:
    """A new recipient's first occurrence: the first, after `after_date`, whose send time is at most the
    type's catch-up window ago.

    One whose send time has passed (a recipient created at 11:00 on their
    birthday) is due at once, under the occurrence's usual key. None if the
    recipient has no occurrence of this type.
    """
    return next_occurrence(
        recipient=recipient,
        event_type=event_type,
        now=now - catch_up_window(event_type=event_type),
        after_date=after_date,
    )


def first_pending_event_rows(
    *, recipients: Iterable[StoredRecipient], now: datetime, handled: Mapping[tuple[str, str], date]
) -> list[PendingEventRow]:
    """Each new recipient's first occurrence of every event type (first_occurrence's), as a PENDING event row.

    `handled`: the latest occurrence handled for a deleted recipient, by (external
    id, event type) (scheduling.selectors.deleted_occurrences_latest). For the
    bulk paths: the windows are read once, not once a recipient (each setting
    read is a Python call, and they were a tenth of the import's computing).
    """
    earliest = [
        (event_type, handler, now - catch_up_window(event_type=event_type))
        for event_type, handler in REGISTRY.items()
    ]
    return [
        pending_event_row(user_id=recipient.id, event_type=event_type, occurrence=occurrence)
        for recipient in recipients
        for event_type, handler, since in earliest
        # None: no occurrence of this type (no anniversary date), so no event.
        if (
            occurrence := handler.next_occurrence(
                user=recipient,
                now=since,
                after_date=(
                    handled.get((recipient.external_id, event_type))
                    if handled and recipient.external_id is not None
                    else None
                ),
            )
        )
        is not None
    ]


def scheduled_occurrence(
    *, recipient: StoredRecipient, event_type: str, now: datetime, pending_date: date | None = None
) -> Occurrence | None:
    """The occurrence the recipient's PENDING event of this type must be for, from their current data.

    The first occurrence after the last one handled whose send time is at most
    the type's catch-up window ago (first_occurrence's rule: an edit that makes
    today a birthday after its send time gets today's greeting, due at once).
    One exception: the occurrence already pending (`pending_date`)
    stays when only its send time has passed (a move to a zone where 09:00 came
    earlier, or a scheduler running late); it was never sent, so it is due now.
    Whether the pending occurrence still follows from the data is asked of the
    handler's next_occurrence, the rule every new event is computed by. None:
    the recipient has no occurrence of this type (no anniversary date), so no
    PENDING event of it either.
    """
    after_date = last_handled_occurrence(recipient=recipient, event_type=event_type, now=now)
    upcoming = first_occurrence(recipient=recipient, event_type=event_type, now=now, after_date=after_date)
    if upcoming is None or pending_date is None or pending_date >= upcoming.occurrence_date:
        # Equal: the pending occurrence stands. Later: an earlier one is still
        # ahead (a zone where the day's send has not come yet) or within its
        # catch-up window, and nothing was sent for it, so keeping the later
        # one would skip a birthday.
        return upcoming
    # Earlier: it stays only if, counting from its own send instant in the
    # recipient's zone, it is the next occurrence; a date that is no longer an
    # occurrence (the date of birth changed) gives way to the upcoming one.
    as_of_pending = next_occurrence(
        recipient=recipient,
        event_type=event_type,
        now=local_send_instant(pending_date, recipient.timezone, recipient.send_time).target_utc,
        after_date=after_date,
    )
    # Not None: whether a recipient has occurrences does not depend on the instant.
    assert as_of_pending is not None
    return as_of_pending if as_of_pending.occurrence_date == pending_date else upcoming


class PendingEventRow(NamedTuple):
    """A new PENDING event's own values, for set-based inserts: its fields are the columns written.

    What every new PENDING event shares is in pending_event_defaults.
    """

    id: uuid.UUID
    user_id: uuid.UUID
    event_type: str
    occurrence_date: date
    target_timestamp_utc: datetime
    target_timestamp_local: str
    target_timezone: str
    idempotency_key: str


def pending_event_row(*, user_id: uuid.UUID, event_type: str, occurrence: Occurrence) -> PendingEventRow:
    """A new PENDING event for the recipient's `occurrence`, as a row to insert."""
    # By position, in the fields' order: one call per row of a batch, and keywords cost more.
    return PendingEventRow(
        uuid7(),
        user_id,
        event_type,
        occurrence.occurrence_date,
        occurrence.target_utc,
        occurrence.target_local.isoformat(),
        occurrence.timezone_name,
        idempotency_key_for(
            user_id=user_id, event_type=event_type, occurrence_date=occurrence.occurrence_date
        ),
    )


def pending_event_defaults(*, now: datetime) -> dict[str, Any]:
    """What every new PENDING event shares."""
    return {
        "status": EventStatus.PENDING.value,
        "failure_reason": "",
        "version": 1,
        "created_at": now,
        "updated_at": now,
    }


def pending_event(*, user_id: uuid.UUID, event_type: str, occurrence: Occurrence, now: datetime) -> Event:
    """A new, unsaved PENDING event (for the single-row paths that return the model)."""
    row = pending_event_row(user_id=user_id, event_type=event_type, occurrence=occurrence)
    return Event(**row._asdict(), **pending_event_defaults(now=now))
