"""Remembering, briefly, which occurrences a deleted recipient was already given.

A recipient deleted in the afternoon and created again from the same record
(an import run again, a client's sync, both matching by external id) is a new
row, with new idempotency keys and no history. Without a record, the catch-up
window would greet them a second time for the day. So a deletion leaves, for
each occurrence of theirs already handled, a row
keyed by a digest of their external id (scheduling.models.DeletedRecipientOccurrence),
which the next recipient with that external id counts as handled
(scheduling.services.occurrences.last_handled_occurrence). A recipient without
an external id cannot be recognised and leaves nothing.

Handled means concluded (COMPLETED or FAILED: sent, or given up on with a
reason), or in progress (PROCESSING) with a message that may have reached a
receiver (the erase's `reached`: a request for one of its deliveries was
started). An occurrence in progress whose deliveries all still waited unsent
(a paused or failing destination, a queue behind) was cancelled by the
deletion before anyone saw it: it is not remembered, and the same person
created again the same day gets it, once.

Each row lasts as long as its occurrence could be given again, and no longer:
a send time on local date D is at the latest D+1 11:59 UTC (D 23:59 at UTC-12),
and the catch-up window of its type runs from there. The history prune
(delivery.dispatch.retention) deletes the rows past that.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Q

from scheduling.handlers import REGISTRY
from scheduling.models import DeletedRecipientOccurrence, Event, EventStatus
from scheduling.services.occurrences import catch_up_window

# The last instant of any local date D, in the zone furthest behind UTC (UTC-12), is before D+1 12:00 UTC.
_LATEST_SEND_OF_A_LOCAL_DATE = timedelta(days=1, hours=12)


def deleted_occurrence_expiry(*, event_type: str, occurrence_date: date) -> datetime:
    """When the occurrence can no longer be caught up in any zone at any send time."""
    day_start = datetime.combine(occurrence_date, time(0), tzinfo=UTC)
    return day_start + _LATEST_SEND_OF_A_LOCAL_DATE + catch_up_window(event_type=event_type)


def deleted_occurrences_record(
    *, user_id: uuid.UUID, external_id: str | None, now: datetime, reached: Collection[uuid.UUID] = ()
) -> int:
    """Remember the recipient's handled occurrences that could still be caught up; call before deleting them.

    `reached`: the ids of the events in progress whose message may have reached
    a receiver; one in progress and not among them is not remembered. Returns
    how many were remembered (none without an external id).
    """
    if external_id is None:
        return 0
    digest = DeletedRecipientOccurrence.digest_of(external_id)
    # Only the last couple of days' occurrences can still be caught up; the
    # recipient's rows are read through the (user, type, date) index.
    earliest = (now - _LATEST_SEND_OF_A_LOCAL_DATE - max_catch_up_window()).date()
    handled = (
        Event.objects.filter(user_id=user_id, occurrence_date__gte=earliest)
        .filter(
            Q(status__in=(EventStatus.COMPLETED, EventStatus.FAILED))
            | Q(status=EventStatus.PROCESSING, id__in=list(reached))
        )
        .values_list("event_type", "occurrence_date")
    )
    rows = [
        DeletedRecipientOccurrence(
            recipient_digest=digest,
            event_type=event_type,
            occurrence_date=occurrence_date,
            expires_at=expires_at,
        )
        for event_type, occurrence_date in handled
        if (expires_at := deleted_occurrence_expiry(event_type=event_type, occurrence_date=occurrence_date))
        > now
    ]
    # A row already there: the same record deleted twice the same day. It stands.
    DeletedRecipientOccurrence.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)


def deleted_occurrences_forget_expired(*, now: datetime) -> int:
    """Delete the rows whose occurrence can no longer be caught up; return how many went."""
    deleted, _ = DeletedRecipientOccurrence.objects.filter(expires_at__lte=now).delete()
    return deleted


def max_catch_up_window() -> timedelta:
    """The longest catch-up window of any registered event type."""
    return max((catch_up_window(event_type=event_type) for event_type in REGISTRY), default=timedelta(0))
