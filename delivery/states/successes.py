"""A success recorded on its delivery, written down as an attempt row when the delivery no longer says it.

A success writes no attempt row (delivery.worker.record): its delivery's columns are its attempt
(delivery.selectors.SUCCESS_ATTEMPT_COLUMNS). That holds while the delivery is
DELIVERED. A recovery queuing it again, or an erasure deleting it, first calls
`successes_log`, so the attempt outlives what the row says: the attempt log reads
the same before and after, and an erased recipient's attempts stay, naming no one.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection

from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus
from delivery.selectors import SUCCESS_ATTEMPT_COLUMNS, SUCCESS_ATTEMPT_VALUES
from runtime.sql import execute_count


def successes_log(*, delivery_ids: Collection[uuid.UUID]) -> int:
    """Write the success recorded on each of these deliveries (if any) as an attempt row; return how many.

    One statement: the deliveries' success columns cleared (so the success is never
    shown twice) and the rows inserted from their values before. The caller holds the
    deliveries' row locks, or the statement takes them.
    """
    ids = list(delivery_ids)
    if not ids:
        return 0
    delivery, attempt = Delivery._meta.db_table, DeliveryAttempt._meta.db_table
    names = [*SUCCESS_ATTEMPT_COLUMNS, *SUCCESS_ATTEMPT_VALUES]
    chosen = ", ".join(f"d.{column} AS {name}" for name, column in SUCCESS_ATTEMPT_COLUMNS.items())
    return execute_count(
        f"WITH s AS (SELECT {chosen} FROM {delivery} d WHERE d.id = ANY(%s) AND d.status = %s "
        "AND d.delivered_duration_ms IS NOT NULL FOR UPDATE), "
        f"cleared AS (UPDATE {delivery} d SET delivered_duration_ms = NULL, delivered_by = '', delivered_response = '' "
        "FROM s WHERE d.id = s.delivery_id) "
        f"INSERT INTO {attempt} ({', '.join(names)}) "
        f"SELECT {', '.join(SUCCESS_ATTEMPT_COLUMNS)}, {', '.join(['%s'] * len(SUCCESS_ATTEMPT_VALUES))} FROM s",
        [ids, DeliveryStatus.DELIVERED, *SUCCESS_ATTEMPT_VALUES.values()],
    )
