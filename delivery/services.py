"""Writes to the delivery outbox: enqueue, claim under a lease, record outcomes, release."""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from config.bulk import copy_models
from config.wakeup import WORKER_CHANNEL, notify
from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus
from scheduling.exceptions import InvalidStateTransition, OptimisticLockError
from scheduling.models import Event, EventStatus
from scheduling.services import events_transition_many

if TYPE_CHECKING:
    from delivery.transport import SendResult

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedDelivery:
    """What a worker needs to send one delivery, read while claiming it."""

    id: uuid.UUID
    event_id: uuid.UUID
    event_version: int
    user_id: uuid.UUID
    idempotency_key: str
    endpoint_url: str
    payload: dict
    attempt: int
    max_attempts: int


def _new_delivery(*, event: Event, now: datetime) -> Delivery:
    """The outbox row for an event whose payload is rendered: due now, to today's receiver."""
    return Delivery(
        event_id=event.id,
        idempotency_key=event.idempotency_key,
        endpoint_url=settings.WEBHOOK_URL,
        payload=event.delivery_payload,
        next_attempt_at=now,
        max_attempts=settings.DELIVERY_MAX_ATTEMPTS,
    )


def deliveries_enqueue(*, events: list[Event], now: datetime) -> int:
    """Queue one delivery per event (PROCESSING, payload rendered) and wake the workers."""
    if not events:
        return 0
    copy_models([_new_delivery(event=event, now=now) for event in events])
    notify(WORKER_CHANNEL)
    return len(events)


def delivery_requeue_for_event(*, event: Event, now: datetime) -> Delivery:
    """Queue an operator-resent event's one delivery again, or create it if it had none."""
    delivery = Delivery.objects.select_for_update().filter(event_id=event.id).first()
    if delivery is None:
        delivery = _new_delivery(event=event, now=now)
        delivery.save(force_insert=True)
    else:
        if delivery.status != DeliveryStatus.DEAD:
            raise InvalidStateTransition(
                f"Delivery {delivery.id} is {delivery.status}; only a DEAD delivery can be resent."
            )
        delivery.status = DeliveryStatus.QUEUED
        delivery.payload = event.delivery_payload
        # The operator resends to today's receiver; the old error stays in the attempt log.
        delivery.endpoint_url = settings.WEBHOOK_URL
        delivery.last_error = ""
        delivery.next_attempt_at = now
        delivery.max_attempts = delivery.attempts + settings.DELIVERY_MAX_ATTEMPTS
        delivery.save(
            update_fields=[
                "status", "payload", "endpoint_url", "last_error", "next_attempt_at", "max_attempts", "updated_at"
            ]
        )
    notify(WORKER_CHANNEL)
    return delivery


def delivery_resend(*, delivery: Delivery, operator: str) -> Delivery:
    """Operator action: resend a DEAD delivery (its FAILED event goes back to the queue)."""
    from scheduling.services import event_resend

    if delivery.status != DeliveryStatus.DEAD:
        raise InvalidStateTransition(
            f"Only DEAD deliveries can be resent; delivery {delivery.id} is {delivery.status}."
        )
    event_resend(event=delivery.event, operator=operator)
    delivery.refresh_from_db()
    return delivery


def retry_delay(*, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before the next try: capped exponential backoff with full jitter.

    A receiver's Retry-After is honoured up to the cap (a receiver asking for a
    day must not park a birthday greeting for a day).
    """
    cap = settings.DELIVERY_RETRY_MAX.total_seconds()
    if retry_after is not None:
        return min(max(retry_after, 0.0), cap)
    base = settings.DELIVERY_RETRY_BASE.total_seconds()
    return random.uniform(0, min(cap, base * 2 ** max(attempt - 1, 0)))


def _duration_ms(started: datetime | None, finished: datetime) -> int:
    if started is None:
        return 0
    return max(0, int((finished - started).total_seconds() * 1000))


def deliveries_claim(
    *,
    worker: str,
    limit: int,
    lease: timedelta,
    now: datetime | None = None,
) -> list[ClaimedDelivery]:
    """Lease up to `limit` due deliveries to `worker` in one short transaction.

    Due means QUEUED with `next_attempt_at <= now`, or SENDING with an expired
    lease (its worker was lost: the attempt it started is logged as abandoned).
    Rows other workers hold are skipped, never waited for. The HTTP call happens
    after this commits; nothing stays locked across the network.
    """
    now = now or timezone.now()
    if limit <= 0:
        return []
    with transaction.atomic():
        expired = list(
            Delivery.objects.filter(status=DeliveryStatus.SENDING, locked_until__lt=now)
            .order_by("locked_until")
            .select_for_update(skip_locked=True)
            .values(
                "id", "event_id", "attempts", "max_attempts", "locked_by", "locked_until", "attempt_started_at"
            )[:limit]
        )
        queued_ids = list(
            Delivery.objects.filter(status=DeliveryStatus.QUEUED, next_attempt_at__lte=now)
            .order_by("next_attempt_at")
            .select_for_update(skip_locked=True)
            .values_list("id", flat=True)[: limit - len(expired)]
        )
        reclaimable = _abandon_expired(expired=expired, now=now)
        ids = queued_ids + reclaimable
        if not ids:
            return []
        Delivery.objects.filter(id__in=ids).update(
            status=DeliveryStatus.SENDING,
            attempts=F("attempts") + 1,
            locked_by=worker,
            locked_until=now + lease,
            attempt_started_at=now,
            updated_at=now,
        )
        rows = Delivery.objects.filter(id__in=ids).values(
            "id",
            "event_id",
            "event__version",
            "event__user_id",
            "idempotency_key",
            "endpoint_url",
            "payload",
            "attempts",
            "max_attempts",
            "next_attempt_at",
        )
        claimed = [
            ClaimedDelivery(
                id=row["id"],
                event_id=row["event_id"],
                event_version=row["event__version"],
                user_id=row["event__user_id"],
                idempotency_key=row["idempotency_key"],
                endpoint_url=row["endpoint_url"],
                payload=row["payload"],
                attempt=row["attempts"],
                max_attempts=row["max_attempts"],
            )
            for row in sorted(rows, key=lambda r: r["next_attempt_at"])
        ]
    return claimed


def deliveries_renew_leases(*, worker: str, lease: timedelta) -> int:
    """Extend every lease `worker` still holds: a live worker never loses its claims."""
    now = timezone.now()
    return Delivery.objects.filter(status=DeliveryStatus.SENDING, locked_by=worker).update(
        locked_until=now + lease
    )


def _abandon_expired(*, expired: list[dict], now: datetime) -> list[uuid.UUID]:
    """Log the lost workers' attempts; return the ids that may be tried again."""
    if not expired:
        return []
    DeliveryAttempt.objects.bulk_create(
        [
            DeliveryAttempt(
                delivery_id=row["id"],
                number=row["attempts"],
                worker=row["locked_by"],
                started_at=row["attempt_started_at"] or row["locked_until"],
                finished_at=now,
                duration_ms=_duration_ms(row["attempt_started_at"], now),
                outcome=AttemptOutcome.ABANDONED,
                error=(
                    f"Worker {row['locked_by']} lost its lease (expired "
                    f"{row['locked_until'].isoformat()}) before recording an outcome."
                ),
            )
            for row in expired
        ],
        ignore_conflicts=True,  # the lost worker may have logged it after all
    )
    for row in expired:
        logger.warning(
            "Took back a delivery whose worker was lost",
            extra={"delivery_id": str(row["id"]), "lost_worker": row["locked_by"], "attempt": row["attempts"]},
        )
    exhausted = [row for row in expired if row["attempts"] >= row["max_attempts"]]
    if exhausted:
        reasons = {
            row["id"]: f"Gave up after {row['attempts']} attempts; last: worker lost mid-attempt."
            for row in exhausted
        }
        _mark_dead(
            rows=[(row["id"], row["event_id"], reasons[row["id"]]) for row in exhausted],
            now=now,
        )
    exhausted_ids = {row["id"] for row in exhausted}
    return [row["id"] for row in expired if row["id"] not in exhausted_ids]


def _mark_dead(*, rows: list[tuple[uuid.UUID, uuid.UUID, str]], now: datetime) -> None:
    for delivery_id, _event_id, reason in rows:
        Delivery.objects.filter(id=delivery_id).update(
            status=DeliveryStatus.DEAD,
            locked_by="",
            locked_until=None,
            last_error=reason,
            updated_at=now,
        )
    events = list(
        Event.objects.filter(id__in=[event_id for _, event_id, _ in rows], status=EventStatus.PROCESSING)
    )
    reasons = {event_id: reason for _, event_id, reason in rows}
    events_transition_many(
        events=events,
        source=EventStatus.PROCESSING,
        target=EventStatus.FAILED,
        per_event={e.id: {"failure_reason": reasons[e.id]} for e in events},
    )


@dataclass
class RecordSummary:
    delivered: int = 0
    retrying: int = 0
    dead: int = 0
    lease_lost: int = 0


def deliveries_record(*, worker: str, results: list[SendResult]) -> RecordSummary:
    """Write down a batch of attempts and apply their outcomes, in one short transaction.

    Only rows whose lease is still ours (same worker, same attempt, still
    SENDING) are touched; a result for a lease we lost is dropped with a
    warning: the worker that took the row over owns it now, and will send it
    again under the same idempotency key.
    """
    summary = RecordSummary()
    if not results:
        return summary
    try:
        with transaction.atomic():
            _record(worker=worker, results=results, summary=summary)
    except OptimisticLockError as exc:
        # Someone changed an event mid-batch (an operator, say). Record the
        # results one at a time so one conflict cannot hold the others back.
        logger.warning("Batch outcome conflicted; recording one by one", extra={"error": str(exc)})
        summary = RecordSummary()
        for result in results:
            try:
                with transaction.atomic():
                    _record(worker=worker, results=[result], summary=summary)
            except OptimisticLockError as single_exc:
                logger.error(
                    "Event changed under its delivery; outcome not applied to the event",
                    extra={"delivery_id": str(result.delivery.id), "error": str(single_exc)},
                )
                with transaction.atomic():
                    _record(worker=worker, results=[result], summary=summary, update_events=False)
    return summary


def _record(
    *, worker: str, results: list[SendResult], summary: RecordSummary, update_events: bool = True
) -> None:
    from delivery.transport import Outcome

    now = timezone.now()
    leases = dict(
        Delivery.objects.select_for_update()
        .filter(id__in=[r.delivery.id for r in results], status=DeliveryStatus.SENDING, locked_by=worker)
        .values_list("id", "attempts")
    )
    kept = [r for r in results if leases.get(r.delivery.id) == r.delivery.attempt]
    for lost in (r for r in results if leases.get(r.delivery.id) != r.delivery.attempt):
        summary.lease_lost += 1
        logger.warning(
            "Lease lost before the outcome was recorded; another worker owns the delivery now",
            extra=_log_fields(lost),
        )
    if not kept:
        return

    delivered, retrying, dead = [], [], []
    for result in kept:
        if result.outcome == Outcome.DELIVERED:
            delivered.append(result)
        elif result.outcome == Outcome.TRANSIENT and result.delivery.attempt < result.delivery.max_attempts:
            retrying.append(result)
        else:
            dead.append(result)

    copy_models(
        [
            DeliveryAttempt(
                delivery_id=r.delivery.id,
                number=r.delivery.attempt,
                worker=worker,
                started_at=r.started_at,
                finished_at=r.finished_at,
                duration_ms=r.duration_ms,
                outcome=(
                    AttemptOutcome.DELIVERED
                    if r.outcome == Outcome.DELIVERED
                    else AttemptOutcome.TRANSIENT_FAILURE
                    if r.outcome == Outcome.TRANSIENT
                    else AttemptOutcome.PERMANENT_FAILURE
                ),
                status_code=r.status_code,
                error=r.error,
                response_excerpt=r.response_excerpt,
            )
            for r in kept
        ]
    )

    _apply_outcomes(delivered=delivered, retrying=retrying, dead=dead, now=now)

    if update_events:
        def processing(rs):
            return [Event(id=r.delivery.event_id, version=r.delivery.event_version, status=EventStatus.PROCESSING)
                    for r in rs]

        events_transition_many(
            events=processing(delivered),
            source=EventStatus.PROCESSING,
            target=EventStatus.COMPLETED,
            executed_at=now,
        )
        events_transition_many(
            events=processing(dead),
            source=EventStatus.PROCESSING,
            target=EventStatus.FAILED,
            per_event={r.delivery.event_id: {"failure_reason": _dead_reason(r)} for r in dead},
        )
        if retrying:
            # Not a state change: the event stays PROCESSING while its delivery retries.
            Event.objects.filter(id__in=[r.delivery.event_id for r in retrying]).update(
                retry_count=F("retry_count") + 1, updated_at=now
            )

    summary.delivered += len(delivered)
    summary.retrying += len(retrying)
    summary.dead += len(dead)
    for state, group in (("delivered", delivered), ("retrying", retrying), ("dead", dead)):
        log = logger.info if state == "delivered" else logger.warning
        for r in group:
            log("Delivery attempt %s", state, extra=_log_fields(r))


def _apply_outcomes(*, delivered: list, retrying: list, dead: list, now: datetime) -> None:
    """Write the deliveries' new states, releasing their leases.

    Delivered rows, the bulk of the traffic, share every new value but the
    status code, so they take one plain UPDATE per status code; the rarer
    retries and deaths carry per-row times and errors (bulk_update).
    """
    released = {"locked_by": "", "locked_until": None, "updated_at": now}
    by_status_code: dict[int | None, list] = {}
    for r in delivered:
        by_status_code.setdefault(r.status_code, []).append(r.delivery.id)
    for status_code, ids in by_status_code.items():
        Delivery.objects.filter(id__in=ids).update(
            status=DeliveryStatus.DELIVERED,
            delivered_at=now,
            next_attempt_at=now,
            last_status_code=status_code,
            last_error="",
            **released,
        )
    rows = [
        Delivery(
            id=r.delivery.id,
            status=DeliveryStatus.QUEUED,
            next_attempt_at=now + timedelta(seconds=retry_delay(attempt=r.delivery.attempt, retry_after=r.retry_after)),
            last_status_code=r.status_code,
            last_error=r.describe(),
            **released,
        )
        for r in retrying
    ] + [
        Delivery(
            id=r.delivery.id,
            status=DeliveryStatus.DEAD,
            next_attempt_at=now,
            last_status_code=r.status_code,
            last_error=_dead_reason(r),
            **released,
        )
        for r in dead
    ]
    if rows:
        Delivery.objects.bulk_update(
            rows,
            ["status", "next_attempt_at", "last_status_code", "last_error", "locked_by", "locked_until", "updated_at"],
        )


def _dead_reason(result: SendResult) -> str:
    from delivery.transport import Outcome

    if result.outcome == Outcome.TRANSIENT:
        return f"Gave up after {result.delivery.attempt} attempts; last: {result.describe()}"
    return f"Permanent failure: {result.describe()}"


def _log_fields(result: SendResult) -> dict:
    return {
        "event_id": str(result.delivery.event_id),
        "user_id": str(result.delivery.user_id),
        "idempotency_key": result.delivery.idempotency_key,
        "attempt": result.delivery.attempt,
        "status": result.status_code,
        "duration_ms": result.duration_ms,
        "error": result.error or None,
    }


def deliveries_release(*, worker: str, ids: list[uuid.UUID]) -> int:
    """Hand back claims that were never started (graceful shutdown): QUEUED again, due now."""
    if not ids:
        return 0
    now = timezone.now()
    released = Delivery.objects.filter(id__in=ids, status=DeliveryStatus.SENDING, locked_by=worker).update(
        status=DeliveryStatus.QUEUED,
        attempts=F("attempts") - 1,
        locked_by="",
        locked_until=None,
        attempt_started_at=None,
        next_attempt_at=now,
        updated_at=now,
    )
    if released:
        notify(WORKER_CHANNEL)
    return released
