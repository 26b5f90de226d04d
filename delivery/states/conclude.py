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
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from delivery.models import Delivery, DeliveryStatus, Destination
from runtime.sql import after, pipeline, send
from scheduling.models import Event, EventStatus
from scheduling.services.transitions import Actor, EventRef, start_events_transition

logger = logging.getLogger(__name__)

# The move of concluded events out of PROCESSING. Locked and PROCESSING, the move succeeds (strict
# raises if that were ever not so). Each caller checks it once its result is in (runtime.sql.after),
# so that the pipeline it is in goes on meanwhile.
_start_conclusion = partial(start_events_transition, source=EventStatus.PROCESSING, actor=Actor.WORKER)


def events_conclude(*, event_ids: Collection[uuid.UUID | None], now: datetime) -> tuple[int, int]:
    """Conclude those of `event_ids` whose deliveries all ended; return how many COMPLETED and FAILED.

    Its three statements go in one round trip (runtime.sql.pipeline): the
    lock, then the read of the deliveries, which PostgreSQL starts once the
    lock is held, so with a snapshot taken after any other conclusion of the
    same events committed. The read keeps the events still PROCESSING, which
    are the ones locked: an event whose delivery this transaction just ended
    was PROCESSING (it cannot conclude while a delivery is SENDING), and one
    that is not any more is left alone.
    """
    with pipeline():
        return start_events_conclusion(event_ids=event_ids, now=now)()


def start_events_completion_alone(*, delivered: Mapping[uuid.UUID, uuid.UUID | None], now: datetime) -> None:
    """Send the move to COMPLETED of each event all of whose deliveries are among `delivered`, in one UPDATE.

    `delivered`: event id by delivery id, of the deliveries this transaction just moved to
    DELIVERED (or meant to: one whose lease was lost is still SENDING, and keeps its event
    PROCESSING). An event whose deliveries are all among them, DELIVERED, needs no lock and
    no read: no other transaction can end one of them, so nothing can race its conclusion.
    That is every event with one destination, the usual one. The UPDATE leaves any other
    event PROCESSING for the general path (start_events_conclusion), which sent after it in
    the same transaction sees the ones moved here as no longer PROCESSING, and leaves them.
    """
    ids = sorted({event_id for event_id in delivered.values() if event_id is not None})
    if not ids:
        return
    # Checked once its result is in (strict=False: an event left PROCESSING is the general path's).
    after(
        start_events_transition(
            events=[EventRef(event_id) for event_id in ids],
            source=EventStatus.PROCESSING,
            target=EventStatus.COMPLETED,
            actor=Actor.WORKER,
            now=now,
            changes={"executed_at": now},
            strict=False,
            condition=(
                f"NOT EXISTS (SELECT 1 FROM {Delivery._meta.db_table} d WHERE d.event_id = e.id "
                "AND NOT (d.status = %s AND d.id = ANY(%b)))",
                [DeliveryStatus.DELIVERED, list(delivered)],
            ),
        )
    )


def start_events_conclusion(
    *, event_ids: Collection[uuid.UUID | None], now: datetime
) -> Callable[[], tuple[int, int]]:
    """Send the conclusion's lock and read (events_conclude) in the caller's pipeline; the function returned waits
    for the read and sends the events' moves, returning how many COMPLETED and FAILED.

    For a caller that has more to send first in the same round trip: the
    record sends the lock and read with its deliveries' moves, for the events
    those moves end if the leases held. An event whose delivery did not move
    (its lease was lost) is locked and read all the same, and left alone: its
    delivery is still SENDING, or the event is no longer PROCESSING.
    """
    # A digest's delivery has no event (None): nothing concludes by it.
    ids = sorted({event_id for event_id in event_ids if event_id is not None})
    if not ids:
        return lambda: (0, 0)
    send(
        # The ids in binary (%b), as every batch's arrays go (runtime.sql): dumped as text, each uuid is quoted.
        f"SELECT id FROM {Event._meta.db_table} WHERE id = ANY(%b) AND status = %s ORDER BY id FOR UPDATE",
        [ids, EventStatus.PROCESSING],
    )
    read = _start_deliveries_read(ids=ids)
    return lambda: _conclude(rows=read()[0] or [], now=now)


def _start_deliveries_read(*, ids: list[uuid.UUID]) -> Callable[[], tuple[list[tuple[Any, ...]], int]]:
    """Send the read of the locked events' deliveries: whether any is unfinished, how many, the dead ones' errors."""
    # Each event's deliveries through the (event, destination) key, one event at a
    # time: as `event_id = ANY(...)` over the whole table, the planner reads every
    # delivery once per batch recorded whenever it lacks the table's statistics
    # (rows written since the last ANALYZE: a 09:00 burst's; bench/results/REPORT-destinations.md).
    # The same missing statistics make it guess hundreds of deliveries an event,
    # which prices the statement past jit_above_cost: compiling it would cost far more than running it.
    # Off for the rest of the caller's transaction, whose statements are as short.
    send("SET LOCAL jit = off", [])
    return send(
        "SELECT e.id, x.unfinished, x.deliveries, x.dead, x.dead_errors "
        f"FROM {Event._meta.db_table} e "
        "CROSS JOIN LATERAL (SELECT bool_or(d.status IN (%s, %s)) AS unfinished, count(*) AS deliveries, "
        "array_agg(COALESCE(t.name, 'a deleted destination') || ': ' || d.last_error ORDER BY t.name) "
        "FILTER (WHERE d.status = %s) AS dead, array_agg(d.last_error) FILTER (WHERE d.status = %s) AS dead_errors "
        f"FROM {Delivery._meta.db_table} d LEFT JOIN {Destination._meta.db_table} t ON t.id = d.destination_id "
        "WHERE d.event_id = e.id) x WHERE e.id = ANY(%b) AND e.status = %s AND x.deliveries > 0 ORDER BY e.id",
        [
            DeliveryStatus.QUEUED,
            DeliveryStatus.SENDING,
            DeliveryStatus.DEAD,
            DeliveryStatus.DEAD,
            ids,
            EventStatus.PROCESSING,
        ],
    )


def _conclude(*, rows: list[tuple[Any, ...]], now: datetime) -> tuple[int, int]:
    """Send the moves of the events whose deliveries all ended (`rows`, the read's); how many COMPLETED and FAILED."""
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
    after(
        _start_conclusion(
            events=completed, target=EventStatus.COMPLETED, now=now, changes={"executed_at": now}
        )
    )
    after(
        _start_conclusion(
            events=failed, target=EventStatus.FAILED, now=now, per_event={"failure_reason": reasons}
        )
    )
    return len(completed), len(failed)


def events_fail_unsent(*, reasons: Mapping[uuid.UUID, str], now: datetime) -> int:
    """FAIL, each with its reason, those of the PROCESSING events whose every delivery was withdrawn unsent.

    For a visibility narrowed after the claim (delivery.dispatch.withdraw): an event left with no
    delivery ends as the claim would have ended it, never sent. The worker's move in the table
    (an event whose deliveries all ended): the withdrawal ends deliveries as a worker does. An
    event with deliveries left is concluded by events_conclude instead.
    """
    ids = sorted(reasons)
    if not ids:
        return 0
    # Locked in id order, as events_conclude locks them; then only those with no delivery left.
    locked = set(
        Event.objects.select_for_update()
        .filter(id__in=ids, status=EventStatus.PROCESSING)
        .order_by("id")
        .values_list("id", flat=True)
    )
    with_deliveries = set(
        Delivery.objects.filter(event_id__in=locked).values_list("event_id", flat=True).distinct()
    )
    unsent = [event_id for event_id in ids if event_id in locked and event_id not in with_deliveries]
    with pipeline():
        after(
            _start_conclusion(
                events=[EventRef(event_id) for event_id in unsent],
                target=EventStatus.FAILED,
                now=now,
                per_event={"failure_reason": [reasons[event_id] for event_id in unsent]},
            )
        )
    return len(unsent)
