"""An occurrence is done when every one of its deliveries ended: COMPLETED, or FAILED naming the dead ones.

Called in the transaction that ended some deliveries (a record of answers, a
take-over, an expiry), after moving them. It locks their events (FOR UPDATE,
in id order so two callers never wait on each other in a cycle), then moves
only those with no delivery still QUEUED or SENDING. Two workers ending the
last two deliveries of one event are serialised by that lock, and the later
one reads the other's committed move (READ COMMITTED: its statement after the
wait sees it), so exactly one of them concludes the event.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from datetime import datetime

from delivery.models import Delivery, DeliveryStatus, Destination
from runtime.sql import execute
from scheduling.models import Event, EventStatus
from scheduling.services.transitions import Actor, EventRef, events_transition

logger = logging.getLogger(__name__)


def events_conclude(*, event_ids: Collection[uuid.UUID], now: datetime) -> tuple[int, int]:
    """Conclude those of `event_ids` whose deliveries all ended; return how many COMPLETED and FAILED."""
    if not event_ids:
        return 0, 0
    ids = sorted(set(event_ids))
    locked = execute(
        f"SELECT id FROM {Event._meta.db_table} WHERE id = ANY(%s) AND status = %s ORDER BY id FOR UPDATE",
        [ids, EventStatus.PROCESSING],
    )
    if not locked:
        return 0, 0
    # Each event's deliveries through the (event, destination) key, one event at a
    # time: as `event_id = ANY(...)` over the whole table, the planner reads every
    # delivery once per batch recorded whenever it lacks the table's statistics
    # (rows written since the last ANALYZE: a 09:00 burst's), 0.3 s a batch at
    # 300,000 deliveries against a few ms this way (bench/results/REPORT-destinations.md).
    # The same missing statistics make it guess hundreds of deliveries an event,
    # which prices the statement past jit_above_cost: compiling it would take 0.4 s.
    # Off for the rest of the caller's transaction, whose statements are as short.
    execute("SET LOCAL jit = off", [])
    rows = execute(
        "SELECT e.id, x.unfinished, x.deliveries, x.dead, x.dead_errors FROM unnest(%s::uuid[]) AS e(id) "
        "CROSS JOIN LATERAL (SELECT bool_or(d.status IN (%s, %s)) AS unfinished, count(*) AS deliveries, "
        "array_agg(COALESCE(t.name, 'a deleted destination') || ': ' || d.last_error ORDER BY t.name) "
        "FILTER (WHERE d.status = %s) AS dead, array_agg(d.last_error) FILTER (WHERE d.status = %s) AS dead_errors "
        f"FROM {Delivery._meta.db_table} d LEFT JOIN {Destination._meta.db_table} t ON t.id = d.destination_id "
        "WHERE d.event_id = e.id) x WHERE x.deliveries > 0",
        [
            [row[0] for row in locked],
            DeliveryStatus.QUEUED,
            DeliveryStatus.SENDING,
            DeliveryStatus.DEAD,
            DeliveryStatus.DEAD,
        ],
    )
    completed, failed, reasons = [], [], []
    for event_id, unfinished, deliveries, dead, dead_errors in rows:
        if unfinished:
            continue
        if dead:
            failed.append(EventRef(event_id))
            # One destination: its delivery's reason says it all; several: which ones died, and why.
            reasons.append(dead_errors[0] if deliveries == 1 else "Dead at " + "; ".join(dead))
        else:
            completed.append(EventRef(event_id))
    # Locked and PROCESSING: both moves succeed (strict raises if that were ever not so).
    events_transition(
        events=completed,
        source=EventStatus.PROCESSING,
        target=EventStatus.COMPLETED,
        actor=Actor.WORKER,
        now=now,
        changes={"executed_at": now},
    )
    events_transition(
        events=failed,
        source=EventStatus.PROCESSING,
        target=EventStatus.FAILED,
        actor=Actor.WORKER,
        now=now,
        per_event={"failure_reason": reasons},
    )
    return len(completed), len(failed)
