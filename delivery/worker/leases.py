"""The worker's side of a lease: claim due deliveries, renew, hand back, take over a lost worker's."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from delivery.models import AttemptOutcome, Delivery, DeliveryStatus
from delivery.receivers.protocol import ClaimedDelivery
from delivery.rules.retry import RetryPolicy, decide
from delivery.states.transitions import (
    Due,
    NewLease,
    Rows,
    deliveries_transition,
    start_deliveries_transition,
)
from delivery.worker.record import AttemptLogRow, AttemptRecord, attempts_apply
from runtime.sql import execute_count, pipeline, send
from runtime.wakeup import WORKER_CHANNEL, notify

logger = logging.getLogger(__name__)

_CLAIM_RETURNS = (
    "id",
    "event_id",
    "idempotency_key",
    "endpoint_key",
    "payload",
    "attempts",
    "max_attempts",
    "next_attempt_at",
    "created_at",
    "requeued_at",
)
_EXPIRED_FIELDS = (
    "id",
    "event_id",
    "attempts",
    "max_attempts",
    "locked_by",
    "locked_until",
    "attempt_started_at",
)


def deliveries_claim(
    *,
    worker: str,
    limit: int,
    lease: timedelta,
    now: datetime | None = None,
    take_over_expired: bool = True,
    skip_keys: Sequence[str] = (),
    probe_key: str | None = None,
) -> list[ClaimedDelivery]:
    """Lease up to `limit` due deliveries to `worker` in one short transaction.

    Due means QUEUED with `next_attempt_at <= now`; with `take_over_expired`,
    deliveries whose worker was lost (lease expired, nobody renewed it) are
    first put back in the queue, their attempt logged as abandoned. Rows other
    workers hold are skipped, never waited for. The HTTP calls happen after this
    commits: nothing stays locked across the network. Deliveries to
    `skip_keys` are left waiting; with `probe_key`, only that endpoint's
    oldest due delivery is claimed, as its probe.
    """
    now = now or timezone.now()
    if limit <= 0:
        return []
    # One round trip and the commit (runtime.sql.pipeline): the look for expired leases and the
    # claim are sent together. What the look finds (rarely anything) is taken back after the
    # claim, in the same transaction, and a second claim fills what room the first left.
    want = 1 if probe_key else limit
    with transaction.atomic(), pipeline():
        expired = _expired_lock(now=now, limit=limit) if take_over_expired else None
        rows = _claim_due(
            worker=worker, limit=want, lease=lease, now=now, skip_keys=skip_keys, probe_key=probe_key
        )
        if (
            expired is not None
            and _take_over_expired(expired=expired()[0] or [], now=now)
            and len(rows) < want
        ):
            rows += _claim_due(
                worker=worker,
                limit=want - len(rows),
                lease=lease,
                now=now,
                skip_keys=skip_keys,
                probe_key=probe_key,
            )
    return _claimed(rows=rows, probe=probe_key is not None)


def _claimed(*, rows: list[tuple[Any, ...]], probe: bool) -> list[ClaimedDelivery]:
    """The claimed rows (_CLAIM_RETURNS) as what the worker sends, in their due order."""
    rows.sort(key=lambda row: row[7])
    # By position, in the fields' order: one per claimed row, and keywords cost more. The
    # jsonb payload comes back as text (Django's psycopg loader) and is sent as it is; a
    # delivery queued again by an operator counts its lateness from then (requeued_at).
    return [
        ClaimedDelivery(
            row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], row[9] or row[8], probe
        )
        for row in rows
    ]


def _claim_due(
    *,
    worker: str,
    limit: int,
    lease: timedelta,
    now: datetime,
    skip_keys: Sequence[str],
    probe_key: str | None,
) -> list[tuple[Any, ...]]:
    return start_deliveries_transition(
        source=DeliveryStatus.QUEUED,
        target=DeliveryStatus.SENDING,
        select=Due(now=now, limit=limit, skip_keys=skip_keys, only_key=probe_key),
        now=now,
        lease=NewLease(worker=worker, until=now + lease),
        returning=_CLAIM_RETURNS,
        # Its rows decoded in C: as text, each row's timestamps would go through Django's Python
        # loader, and its uuids through uuid.UUID(), on every claimed row.
        binary=True,
    )()


def _expired_lock(*, now: datetime, limit: int) -> Callable[[], tuple[list[tuple[Any, ...]] | None, int]]:
    """Send the lock of up to `limit` deliveries whose lease expired; the function returned waits for their rows."""
    return send(
        f"SELECT {', '.join(_EXPIRED_FIELDS)} FROM {Delivery._meta.db_table} WHERE status = %s AND locked_until < %s "
        f"ORDER BY locked_until LIMIT %s FOR UPDATE SKIP LOCKED",
        [
            DeliveryStatus.SENDING,
            Delivery._meta.get_field("locked_until").get_db_prep_value(now, connection),
            limit,
        ],
    )


def _take_over_expired(*, expired: list[tuple[Any, ...]], now: datetime) -> int:
    """Put the locked deliveries whose lease expired back in the queue (or DEAD with no attempt left)."""
    if not expired:
        return 0
    policy = RetryPolicy.from_settings()
    records = []
    events = {}
    for delivery_id, event_id, attempt, max_attempts, lost_worker, locked_until, started_at in expired:
        events[delivery_id] = event_id
        started_at = started_at or locked_until
        records.append(
            AttemptRecord(
                row=AttemptLogRow(
                    delivery_id=delivery_id,
                    number=attempt,
                    worker=lost_worker,
                    started_at=started_at,
                    finished_at=now,
                    duration_ms=max(0, int((now - started_at).total_seconds() * 1000)),
                    outcome=AttemptOutcome.ABANDONED,
                    status_code=None,
                    error=(
                        f"Worker {lost_worker} lost its lease (expired {locked_until.isoformat()}) "
                        "before recording an outcome."
                    ),
                    response_excerpt="",
                ),
                max_attempts=max_attempts,
                decision=decide(
                    outcome=AttemptOutcome.ABANDONED,
                    attempt=attempt,
                    max_attempts=max_attempts,
                    description="worker lost mid-attempt",
                    policy=policy,
                ),
            )
        )
        logger.warning(
            "Took back a delivery whose worker was lost",
            extra={"delivery_id": str(delivery_id), "lost_worker": lost_worker, "attempt": attempt},
        )
    return len(attempts_apply(records=records, now=now, expired_before=now, events=events))


def deliveries_renew_leases(*, worker: str, ids: Collection[uuid.UUID], lease: timedelta) -> int:
    """Extend the leases of the deliveries `ids` that `worker` still holds: a live worker keeps what it has in hand.

    `ids` are the deliveries the worker has in hand (waiting to be sent, in
    flight, sent with the outcome not yet recorded). A row SENDING under the
    worker's name that is not among them is left to expire and be taken over:
    after a failover that lost the last commits, the new primary may show rows
    SENDING under this worker whose outcomes it recorded on the lost timeline;
    renewing by name kept those SENDING, and their events PROCESSING, for as
    long as the worker lived. Not a change of status, so not a transition:
    only `locked_until` moves.
    """
    if not ids:
        return 0
    # One statement with the ids as one array, however many the worker holds.
    return execute_count(
        f"UPDATE {Delivery._meta.db_table} SET locked_until = %s "
        "WHERE id = ANY(%s) AND status = %s AND locked_by = %s",
        [timezone.now() + lease, list(ids), DeliveryStatus.SENDING.value, worker],
    )


def deliveries_release(*, worker: str, claimed: list[ClaimedDelivery]) -> int:
    """Hand back claims that were never started (shutdown, a paused or failing endpoint): QUEUED again.

    The attempt they were claimed for never happened, so it is not counted.
    """
    if not claimed:
        return 0
    now = timezone.now()
    with transaction.atomic():
        released = deliveries_transition(
            source=DeliveryStatus.SENDING,
            target=DeliveryStatus.QUEUED,
            select=Rows(
                ids=[d.id for d in claimed],
                attempts=[d.attempt for d in claimed],
                held_by=worker,
                values={
                    "attempts": [d.attempt - 1 for d in claimed],
                    # Its place in the due order, so a paused endpoint's backlog drains as it was queued.
                    "next_attempt_at": [min(d.due_at or now, now) for d in claimed],
                },
            ),
            now=now,
            changes={"attempt_started_at": None},
        )
        if released:
            notify(WORKER_CHANNEL)
    return len(released)
