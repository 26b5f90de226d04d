"""Writing attempts down and applying their outcomes: a few set-based statements per batch.

Per batch: one UPDATE of the deliveries for each outcome kind present
(delivered, to retry, dead), each checked against the lease; one insert of
the attempt log for the rows whose lease held; one UPDATE of their events for
each final outcome. A result whose lease was lost (another worker took the
delivery over) changes nothing: that worker owns it now and resends it under
the same idempotency key.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from delivery.models import AttemptOutcome, DeliveryAttempt, DeliveryStatus
from delivery.retry import Decision, RetryPolicy, decide
from delivery.services.transitions import Rows, deliveries_transition
from delivery.transport import SendResult
from runtime.copy import copy_rows
from scheduling.models import EventStatus
from scheduling.services.transitions import Actor, EventRef, events_transition

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptRecord:
    """One finished (or abandoned) attempt, with what follows from it."""

    delivery_id: uuid.UUID
    attempt: int
    worker: str
    started_at: datetime
    finished_at: datetime
    duration_ms: int
    outcome: str
    status_code: int | None
    error: str
    response_excerpt: str
    decision: Decision


@dataclass
class RecordSummary:
    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    lease_lost: int = 0


_ATTEMPT_COLUMNS = (
    "delivery_id", "number", "worker", "started_at", "finished_at", "duration_ms", "outcome",
    "status_code", "error", "response_excerpt",
)


def attempts_apply(
    *, records: Sequence[AttemptRecord], now: datetime, held_by: str | None = None,
    expired_before: datetime | None = None,
) -> set[uuid.UUID]:
    """Apply each record's decision to its delivery and event, and log the attempts; return the ids applied.

    The caller's transaction holds it together. Only deliveries still under the
    lease described (`held_by` a worker, or `expired_before` a time) move.
    """
    applied: dict[uuid.UUID, uuid.UUID] = {}  # delivery id -> event id
    by_status: dict[str, list[AttemptRecord]] = {}
    for record in records:
        by_status.setdefault(record.decision.status, []).append(record)
    for status, group in by_status.items():
        values = {
            "last_status_code": [r.status_code for r in group],
            "last_error": [r.decision.reason for r in group],
        }
        changes = {}
        if status == DeliveryStatus.QUEUED:
            values["next_attempt_at"] = [now + r.decision.delay for r in group]
        else:
            changes["next_attempt_at"] = now
        if status == DeliveryStatus.DELIVERED:
            changes["delivered_at"] = now
        moved = deliveries_transition(
            source=DeliveryStatus.SENDING,
            target=status,
            select=Rows(
                ids=[r.delivery_id for r in group],
                attempts=[r.attempt for r in group],
                held_by=held_by,
                expired_before=expired_before,
                values=values,
            ),
            now=now,
            changes=changes,
            returning=("id", "event_id"),
        )
        applied.update(moved)

    kept = [r for r in records if r.delivery_id in applied]
    copy_rows(
        DeliveryAttempt,
        _ATTEMPT_COLUMNS,
        [
            (r.delivery_id, r.attempt, r.worker, r.started_at, r.finished_at, r.duration_ms, r.outcome,
             r.status_code, r.error, r.response_excerpt)
            for r in kept
        ],
    )
    # The event follows its delivery. Its version is not checked: while the
    # delivery is under lease nothing else may move the event (user edits skip
    # PROCESSING events; a resend needs a DEAD delivery).
    for target, status in ((EventStatus.COMPLETED, DeliveryStatus.DELIVERED), (EventStatus.FAILED, DeliveryStatus.DEAD)):
        group = [r for r in kept if r.decision.status == status]
        events = [EventRef(applied[r.delivery_id]) for r in group]
        moved = events_transition(
            events=events,
            source=EventStatus.PROCESSING,
            target=target,
            actor=Actor.WORKER,
            now=now,
            changes={"executed_at": now} if target == EventStatus.COMPLETED else None,
            per_event={"failure_reason": [r.decision.reason for r in group]} if target == EventStatus.FAILED else None,
            strict=False,
        )
        if len(moved) != len(events):
            logger.error(
                "%s event(s) were not PROCESSING when their delivery finished; delivery outcome kept",
                len(events) - len(moved),
                extra={"event_ids": [str(e.id) for e in events if e.id not in set(moved)][:20]},
            )
    return set(applied)


def deliveries_record(*, worker: str, results: Sequence[SendResult]) -> RecordSummary:
    """Write down a batch of attempts and apply their outcomes, in one short transaction."""
    summary = RecordSummary()
    if not results:
        return summary
    policy = RetryPolicy.from_settings()
    records = [
        AttemptRecord(
            delivery_id=r.delivery.id,
            attempt=r.delivery.attempt,
            worker=worker,
            started_at=r.started_at,
            finished_at=r.finished_at,
            duration_ms=r.duration_ms,
            outcome=r.outcome,
            status_code=r.status_code,
            error=r.error,
            response_excerpt=r.response_excerpt,
            decision=decide(
                outcome=r.outcome,
                attempt=r.delivery.attempt,
                max_attempts=r.delivery.max_attempts,
                description=r.describe(),
                retry_after=r.retry_after,
                policy=policy,
            ),
        )
        for r in results
    ]
    now = timezone.now()
    with transaction.atomic():
        applied = attempts_apply(records=records, now=now, held_by=worker)
    for result, record in zip(results, records, strict=True):
        fields = _log_fields(result)
        if record.delivery_id not in applied:
            summary.lease_lost += 1
            logger.warning(
                "Lease lost before the outcome was recorded; another worker owns the delivery now", extra=fields
            )
        elif record.decision.status == DeliveryStatus.DELIVERED:
            summary.delivered += 1
            logger.info("Delivery attempt delivered", extra=fields)
        elif record.decision.status == DeliveryStatus.QUEUED:
            summary.retrying += 1
            logger.warning("Delivery attempt retrying", extra=fields)
        else:
            summary.dead += 1
            logger.warning("Delivery attempt dead", extra=fields)
    return summary


def _log_fields(result: SendResult) -> dict:
    return {
        "event_id": str(result.delivery.event_id),
        "user_id": result.delivery.user_id,
        "idempotency_key": result.delivery.idempotency_key,
        "attempt": result.delivery.attempt,
        "status": result.status_code,
        "duration_ms": result.duration_ms,
        "error": result.error or None,
        "outcome": AttemptOutcome(result.outcome).label,
    }
