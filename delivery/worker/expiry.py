"""Deliveries that waited too long: a greeting days late does more harm than good.

A delivery waits without spending attempts while its endpoint is failing or
paused, so attempts alone no longer bound how late it can arrive. The same
rule as for our own downtime bounds it: still QUEUED EVENT_MAX_LATENESS after
it was queued, it is DEAD, and its event FAILED with the reason once its
other deliveries ended too.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction

from delivery.models import Delivery, DeliveryStatus
from delivery.rules.retry import late_reason
from delivery.states.conclude import events_conclude
from delivery.states.transitions import Rows, deliveries_transition

logger = logging.getLogger(__name__)

EXPIRE_BATCH = 1000


def deliveries_expire_late(*, now: datetime) -> int:
    """Fail every QUEUED delivery queued more than EVENT_MAX_LATENESS ago; return how many.

    Reads a range of delivery_queued_due_idx (a delivery is never due before
    it was queued, so only rows due before the cutoff can qualify), in batches
    that skip rows a worker holds. A delivery whose next attempt was put off
    (a retry's back-off, a Retry-After: at most DELIVERY_RETRY_MAX) is found
    that much later, unless it is tried again first: then the worker recording
    that attempt gives it up (delivery.rules.retry.decide, `outlived`). So a
    receiver that throttles the same delivery for ever cannot keep it waiting.
    """
    lateness = settings.EVENT_MAX_LATENESS
    cutoff = now - lateness
    table = Delivery._meta.db_table
    expired = 0
    while True:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cutoff_value = Delivery._meta.get_field("created_at").get_db_prep_value(cutoff, connection)
                cursor.execute(
                    f"SELECT id, event_id, attempts, last_error FROM {table} WHERE status = %s "
                    f"AND next_attempt_at < %s AND COALESCE(requeued_at, created_at) < %s ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED",
                    [DeliveryStatus.QUEUED, cutoff_value, cutoff_value, EXPIRE_BATCH],
                )
                rows = cursor.fetchall()
            if not rows:
                return expired
            reasons = [late_reason(lateness=lateness, last=last_error) for _, _, _, last_error in rows]
            moved = deliveries_transition(
                source=DeliveryStatus.QUEUED,
                target=DeliveryStatus.DEAD,
                select=Rows(
                    ids=[row[0] for row in rows],
                    attempts=[row[2] for row in rows],
                    values={"last_error": reasons},
                ),
                now=now,
                returning=("id", "event_id"),
            )
            moved_ids = {delivery_id for delivery_id, _ in moved}
            kept = [(row, reason) for row, reason in zip(rows, reasons, strict=True) if row[0] in moved_ids]
            events_conclude(event_ids={row[1] for row, _ in kept}, now=now)
        expired += len(kept)
        logger.warning(
            "Failed %s deliveries still waiting on their receiver past EVENT_MAX_LATENESS",
            len(kept),
            extra={"cutoff": cutoff.isoformat()},
        )
        if len(rows) < EXPIRE_BATCH:
            return expired
