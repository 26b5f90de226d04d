"""The scheduler's claim: due events become queued deliveries, a batch per transaction.

Per batch, on PostgreSQL: one SELECT locks the due events (FOR UPDATE SKIP
LOCKED, so schedulers share the work without waiting on each other) and
returns what Python needs as tuples; one small SELECT reads the message
templates. Then, in one pipeline (runtime.sql.pipeline), one UPDATE moves the
events to PROCESSING (and one more moves the rare too-late ones to FAILED)
while Python computes the next occurrences; one INSERT writes every claimed
recipient's next occurrence while Python renders the messages, and one their
deliveries; the moves are checked once their results are back. The
messages and the next occurrences are computed in Python, by the event-type
handlers and zoneinfo, so PostgreSQL's own time-zone data never decides a
send time.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from delivery.models import Delivery, DeliveryStatus
from delivery.payload import webhook_payload
from runtime.ids import uuid7
from runtime.sql import execute, insert_rows, pipeline, skip_locked, typed_rows
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.handlers import RecipientRow
from scheduling.models import Event, EventStatus
from scheduling.selectors import message_templates
from scheduling.services.occurrences import (
    PendingEventRow,
    next_occurrence,
    pending_event_defaults,
    pending_event_row,
)
from scheduling.services.transitions import Actor, EventRef, start_events_transition
from users.models import User

logger = logging.getLogger(__name__)


@dataclass
class EnqueueResult:
    queued: int = 0
    too_late: int = 0

    @property
    def claimed(self) -> int:
        return self.queued + self.too_late


class ClaimedEvent(NamedTuple):
    """A claimed event and its recipient, as the claim's SELECT returns them."""

    id: uuid.UUID
    version: int
    event_type: str
    occurrence_date: date
    target: datetime
    idempotency_key: str
    recipient: RecipientRow


_E = {f.name: f for f in Event._meta.concrete_fields}
_U = {f.name: f for f in User._meta.concrete_fields}
_EVENT_FIELDS = [
    _E["id"], _E["version"], _E["event_type"], _E["occurrence_date"], _E["target_timestamp_utc"], _E["idempotency_key"],
]
# Every recipient field a handler may read, by RecipientRow's names: an event
# type whose handler reads another field adds it there, not here.
_RECIPIENT_FIELDS = [_U[name] for name in RecipientRow._fields]
# What the claim returns per event, in the order of ClaimedEvent.
_CLAIMED_FIELDS = _EVENT_FIELDS + _RECIPIENT_FIELDS
DELIVERY_COLUMNS = ("id", "event_id", "idempotency_key", "payload")


def queued_delivery_row(*, event_id: uuid.UUID, idempotency_key: str, payload: dict) -> tuple:
    """A new delivery's own values, in the order of DELIVERY_COLUMNS (the rest: queued_delivery_defaults)."""
    return (uuid7(), event_id, idempotency_key, payload)


def queued_delivery_defaults(*, now: datetime) -> dict:
    """What every new delivery shares: due now, to today's receiver, with a full budget of attempts."""
    return {
        "endpoint_url": settings.WEBHOOK_URL,
        "status": DeliveryStatus.QUEUED.value,
        "attempts": 0,
        "max_attempts": settings.DELIVERY_MAX_ATTEMPTS,
        "next_attempt_at": now,
        "locked_by": "",
        "last_error": "",
        "created_at": now,
        "updated_at": now,
    }


def _claim_sql() -> str:
    event, user = Event._meta.db_table, User._meta.db_table
    return (
        "SELECT e.id, e.version, e.event_type, e.occurrence_date, e.target_timestamp_utc, e.idempotency_key, "
        + ", ".join(f"u.{field.column}" for field in _RECIPIENT_FIELDS)
        + f" FROM {event} e JOIN {user} u ON u.id = e.user_id "
        "WHERE e.status = %s AND e.target_timestamp_utc <= %s "
        f"ORDER BY e.target_timestamp_utc LIMIT %s{skip_locked(of='e')}"
    )


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def deliveries_enqueue_due(*, now: datetime | None = None, batch_size: int = 500) -> EnqueueResult:
    """Claim up to `batch_size` due PENDING events and queue their deliveries, in one transaction.

    Events overdue by more than EVENT_MAX_LATENESS are FAILED instead of sent.
    Every claimed recipient gets their next occurrence as the new PENDING event.
    """
    now = now or timezone.now()
    max_lateness = settings.EVENT_MAX_LATENESS
    with transaction.atomic():
        claimed = typed_rows(
            execute(
                _claim_sql(),
                [EventStatus.PENDING, _E["target_timestamp_utc"].get_db_prep_value(now, connection), batch_size],
                binary=True,
            ),
            _CLAIMED_FIELDS,
        )
        if not claimed:
            return EnqueueResult()
        split = len(_EVENT_FIELDS)
        claimed = [ClaimedEvent(*row[:split], RecipientRow._make(row[split:])) for row in claimed]
        on_time, too_late = [], []
        for event in claimed:
            (on_time if now - event.target <= max_lateness else too_late).append(event)

        # Once per batch, in the batch's transaction: an operator's change
        # applies to every event claimed after it was saved, and to none queued before.
        templates = message_templates()
        # In a pipeline: PostgreSQL moves the events while Python computes the
        # next occurrences, and inserts those while Python renders the messages
        # (a batch of 1,000: 82 -> 63 ms on a 2,000,000-event table with the
        # moves alone overlapped; 100.0 -> 80.8 ms on a 10,000,000-event table
        # once the next occurrences' INSERT was overlapped too).
        with pipeline():
            processing = start_events_transition(
                events=[EventRef(event.id, event.version) for event in on_time],
                source=EventStatus.PENDING,
                target=EventStatus.PROCESSING,
                actor=Actor.SCHEDULER,
                now=now,
            )
            failed = start_events_transition(
                events=[EventRef(event.id, event.version) for event in too_late],
                source=EventStatus.PENDING,
                target=EventStatus.FAILED,
                actor=Actor.SCHEDULER,
                now=now,
                per_event={
                    "failure_reason": [
                        f"Not sent: {_hours(now - event.target)} late, "
                        f"more than EVENT_MAX_LATENESS ({_hours(max_lateness)})."
                        for event in too_late
                    ]
                },
            )
            # The next occurrences first, and their INSERT (the batch's costliest
            # statement: five index entries a row) sent as soon as they are
            # known, so PostgreSQL runs it while Python renders the messages;
            # sent after the UPDATE above, so the claimed events are no longer
            # PENDING when their next ones arrive.
            upcoming = []
            for event in claimed:
                recipient = event.recipient
                # After the occurrence just claimed: every path that creates a PENDING
                # event puts it after the user's last handled one, so nothing handled
                # comes later. Were that ever broken, the insert below would meet
                # the unique (user, type, date) key and skip the row, and the
                # scheduler's reconcile (which reads the history) gives the user
                # their next event within SCHEDULER_RECONCILE_INTERVAL.
                occurrence = next_occurrence(
                    recipient=recipient, event_type=event.event_type, now=now, after_date=event.occurrence_date
                )
                # None: the recipient has no occurrence of this type any more, so no next one.
                if occurrence is not None:
                    upcoming.append(
                        pending_event_row(user_id=recipient.id, event_type=event.event_type, occurrence=occurrence)
                    )
            # A next occurrence may already exist (a recipient's edit or the
            # reconcile created it between our lock and this insert): that row stands.
            insert_rows(
                Event,
                PendingEventRow._fields,
                upcoming,
                same_for_all=pending_event_defaults(now=now),
                ignore_conflicts=True,
            )
            deliveries = [
                queued_delivery_row(
                    event_id=event.id,
                    idempotency_key=event.idempotency_key,
                    payload=webhook_payload(
                        event_id=event.id,
                        event_type=event.event_type,
                        occurrence_date=event.occurrence_date,
                        target_utc=event.target,
                        recipient=event.recipient,
                        template=templates[event.event_type],
                    ),
                )
                for event in on_time
            ]
            insert_rows(Delivery, DELIVERY_COLUMNS, deliveries, same_for_all=queued_delivery_defaults(now=now))
            if deliveries:
                notify(WORKER_CHANNEL)
            # Every claimed row is locked by this transaction, so both moves
            # succeed; were one ever refused, OptimisticLockError rolls all back.
            processing()
            failed()
    for event in too_late:
        logger.warning(
            "Event too late to send; marked FAILED",
            extra={
                "event_id": str(event.id),
                "user_id": str(event.recipient.id),
                "idempotency_key": event.idempotency_key,
                "target": event.target.isoformat(),
            },
        )
    return EnqueueResult(queued=len(on_time), too_late=len(too_late))
