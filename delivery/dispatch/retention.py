"""A history that does not grow forever: old handled events go, with their deliveries and attempts.

COMPLETED and FAILED events whose target time is older than HISTORY_RETENTION
are deleted in batches, each batch in its own short transaction of four
set-based statements: one SELECT picks and locks the batch's events, then one
DELETE each removes their attempts, their deliveries and the events. Django
declares its foreign keys (attempt -> delivery -> event) without ON DELETE
CASCADE, so the database deletes no child row by itself: children go first, the
attempts found through their deliveries while those still exist. A pass that
reaches its end also deletes what erased recipients left: their bare attempts
past the retention, and what recognises them once it has expired
(_erasures_leftovers_prune); and the daily digests of dates before the
retention whose delivery ended (_digests_prune).

What is never deleted:
- PENDING and PROCESSING events: only the two final statuses are selected, and
  the batch's rows are locked (FOR UPDATE SKIP LOCKED), so an operator's resend
  (FAILED -> PROCESSING, which locks the event first) is either skipped or finds
  the event gone; deliveries and attempts are deleted only through the events
  locked here, and a final event's delivery is DELIVERED or DEAD, which no
  worker touches.
- Each recipient's latest handled occurrence of each type, whatever its age:
  scheduling.services.occurrences.last_handled_occurrence reads the latest
  non-PENDING occurrence so that an edit never schedules, and so re-sends, an
  occurrence already handled. An event is deleted only if a later non-PENDING
  occurrence of the same recipient and type exists. That later row is never
  deleted in its turn while it is the latest, and no event ever goes back to
  PENDING, so the answer of last_handled_occurrence never changes, however many
  pruners run at once. (The row is kept rather than the rule made to do
  without it: with a short HISTORY_RETENTION, a sent occurrence can be older
  than the retention while a move to another zone puts its date ahead again.)

The selection reads event_history_idx, the partial (status, target) index on
non-PENDING rows, one status at a time so the range comes out in target order,
and continues after the previous batch's last (target, id): a pass never reads
a row twice, neither the dead entries of rows it deleted nor the latest
occurrences it keeps. The latest-occurrence test is one backward probe per row
of the unique (user, type, occurrence date) index. No index was added for this:
the claim path's partial indexes are untouched, and completions write no extra
index entry. Selecting a batch is a small part of its cost; the three DELETEs
are most of it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus, Digest
from runtime.sql import execute, execute_count, rows_relation
from scheduling.models import Event, EventStatus
from scheduling.services.deleted_recipients import deleted_occurrences_forget_expired

# Events per batch (with their deliveries and attempts): one short transaction each.
PRUNE_BATCH_SIZE = 1000
# How long prune_history rests after each batch, in multiples of the batch's own time:
# the database then gives it half its time at most. Beside a flat-out pruner the
# scheduler's claims slow down visibly; with this rest the slowdown is within a
# shared machine's noise, at a much lower pruning rate than flat out.
PRUNE_REST = 1.0
# The statuses pruned, in the order a pass visits them.
_PRUNED_STATUSES = (EventStatus.COMPLETED, EventStatus.FAILED)

_E = {f.attname: f for f in Event._meta.concrete_fields}


@dataclass(frozen=True)
class PrunePosition:
    """Where a pass has got to: events of `status` after (target, id) come next (from its first if None)."""

    status: str
    target: datetime | None = None
    id: uuid.UUID | None = None


@dataclass(frozen=True)
class PruneBatch:
    """What one batch deleted (or, in a dry run, would delete), and where the next one starts."""

    events: int
    deliveries: int
    attempts: int
    # None: the pass has reached its end.
    next: PrunePosition | None

    @property
    def rows(self) -> int:
        return self.events + self.deliveries + self.attempts


@dataclass(frozen=True)
class PruneTotals(PruneBatch):
    """What a pass's batches deleted together, in how many batches; `next` is where the following one starts."""

    batches: int = 0

    def plus(self, batch: PruneBatch) -> PruneTotals:
        return PruneTotals(
            events=self.events + batch.events,
            deliveries=self.deliveries + batch.deliveries,
            attempts=self.attempts + batch.attempts,
            next=batch.next,
            batches=self.batches + 1,
        )


# The totals of a pass before its first batch.
NO_PRUNE = PruneTotals(events=0, deliveries=0, attempts=0, next=None)


def history_cutoff(*, now: datetime) -> datetime:
    """Handled events whose target is before this are old enough to delete."""
    return now - settings.HISTORY_RETENTION


def _select_sql(*, after: bool, lock: bool) -> str:
    event = Event._meta.db_table
    # Written as a range plus a filter, not a row comparison: event_history_idx
    # holds (status, target), so only the target bound can be an index condition.
    keyset = (
        " AND e.target_timestamp_utc >= %s AND (e.target_timestamp_utc > %s OR e.id > %s)" if after else ""
    )
    # "A later handled occurrence exists" as a comparison with a correlated MAX, not
    # EXISTS: PostgreSQL never turns this into a join, so it stays one backward probe
    # of the (user, type, date) index per candidate; with EXISTS it chose, on small or
    # stale statistics, a hash join that reads every handled row for each batch.
    return (
        f"SELECT e.id, e.target_timestamp_utc FROM {event} e "
        f"WHERE e.status = %s AND e.target_timestamp_utc < %s{keyset} "
        f"AND e.occurrence_date < (SELECT MAX(later.occurrence_date) FROM {event} later "
        "WHERE later.user_id = e.user_id AND later.event_type = e.event_type AND later.status <> %s) "
        f"ORDER BY e.target_timestamp_utc, e.id LIMIT %s{' FOR UPDATE OF e SKIP LOCKED' if lock else ''}"
    )


def _select_batch(
    *, cutoff: datetime, position: PrunePosition, batch_size: int, lock: bool
) -> list[tuple[Any, ...]]:
    target = _E["target_timestamp_utc"]
    after = position.target is not None
    params: list[Any] = [position.status, target.get_db_prep_value(cutoff, connection)]
    if after:
        bound = target.get_db_prep_value(position.target, connection)
        params += [bound, bound, _E["id"].get_db_prep_value(position.id, connection)]
    params += [EventStatus.PENDING, batch_size]
    return execute(_select_sql(after=after, lock=lock), params)


def _delete(ids: list[uuid.UUID]) -> tuple[int, int, int]:
    relation, params = rows_relation("b", [("b_id", _E["id"])], [(event_id,) for event_id in ids])
    batch = f"SELECT b.b_id FROM {relation}"
    event, delivery, attempt = Event._meta.db_table, Delivery._meta.db_table, DeliveryAttempt._meta.db_table
    attempts = execute_count(
        f"DELETE FROM {attempt} WHERE delivery_id IN (SELECT d.id FROM {delivery} d WHERE d.event_id IN ({batch}))",
        params,
    )
    deliveries = execute_count(f"DELETE FROM {delivery} WHERE event_id IN ({batch})", params)
    events = execute_count(f"DELETE FROM {event} WHERE id IN ({batch})", params)
    return events, deliveries, attempts


def _count(ids: list[uuid.UUID]) -> tuple[int, int, int]:
    relation, params = rows_relation("b", [("b_id", _E["id"])], [(event_id,) for event_id in ids])
    delivery, attempt = Delivery._meta.db_table, DeliveryAttempt._meta.db_table
    [(deliveries, attempts)] = execute(
        f"SELECT COUNT(DISTINCT d.id), COUNT(a.id) FROM {delivery} d LEFT JOIN {attempt} a ON a.delivery_id = d.id "
        f"WHERE d.event_id IN (SELECT b.b_id FROM {relation})",
        params,
    )
    return len(ids), deliveries, attempts


def _erasures_leftovers_prune(*, cutoff: datetime, batch_size: int) -> int:
    """At a pass's end: what erased recipients left behind, once it is no longer needed; return the attempts deleted.

    Their attempts (no delivery, naming no one: delivery.erasure) go
    at HISTORY_RETENTION like every attempt, up to a batch a pass, found through
    their own partial index (attempt_erased_finished_idx). What recognises a deleted recipient created again
    goes once no catch-up window can reach its day (scheduling.services.deleted_recipients).
    """
    deleted_occurrences_forget_expired(now=timezone.now())
    attempt = DeliveryAttempt._meta.db_table
    return execute_count(
        f"DELETE FROM {attempt} WHERE id IN (SELECT id FROM {attempt} WHERE delivery_id IS NULL AND finished_at < %s "
        "ORDER BY finished_at LIMIT %s)",
        [DeliveryAttempt._meta.get_field("finished_at").get_db_prep_value(cutoff, connection), batch_size],
    )


def _digests_prune(*, cutoff: datetime, batch_size: int) -> tuple[int, int]:
    """At a pass's end: daily digests sent before `cutoff` (their date's) whose delivery ended, with it and its
    attempts; return (deliveries, attempts) deleted.

    Up to a batch a pass (a destination has one a day). One still QUEUED or SENDING stays. A digest
    without a delivery (one an erasure left naming nobody) goes too: its date is long past, and the
    calendar never builds a past date again.
    """
    digest, delivery, attempt = Digest._meta.db_table, Delivery._meta.db_table, DeliveryAttempt._meta.db_table
    ids = [
        row[0]
        for row in execute(
            f"SELECT g.id FROM {digest} g LEFT JOIN {delivery} d ON d.digest_id = g.id "
            "WHERE g.local_date < %s AND (d.id IS NULL OR d.status = ANY(%s)) ORDER BY g.local_date LIMIT %s "
            "FOR UPDATE OF g SKIP LOCKED",
            [cutoff.date(), [DeliveryStatus.DELIVERED, DeliveryStatus.DEAD], batch_size],
        )
    ]
    if not ids:
        return 0, 0
    attempts = execute_count(
        f"DELETE FROM {attempt} WHERE delivery_id IN (SELECT id FROM {delivery} WHERE digest_id = ANY(%s))",
        [ids],
    )
    deliveries = execute_count(f"DELETE FROM {delivery} WHERE digest_id = ANY(%s)", [ids])
    execute_count(f"DELETE FROM {digest} WHERE id = ANY(%s)", [ids])
    return deliveries, attempts


def _prune_batch(*, cutoff: datetime, position: PrunePosition, batch_size: int, dry_run: bool) -> PruneBatch:
    with transaction.atomic():
        rows = _select_batch(cutoff=cutoff, position=position, batch_size=batch_size, lock=not dry_run)
        ids = [event_id for event_id, _ in rows]
        events, deliveries, attempts = (_count(ids) if dry_run else _delete(ids)) if ids else (0, 0, 0)
    following: PrunePosition | None
    if len(rows) == batch_size:
        last_id, last_target = rows[-1]
        following = PrunePosition(status=position.status, target=last_target, id=last_id)
    else:
        # This status has nothing more to delete: on to the next, or the end of the pass.
        index = _PRUNED_STATUSES.index(position.status) + 1
        following = PrunePosition(status=_PRUNED_STATUSES[index]) if index < len(_PRUNED_STATUSES) else None
    if following is None and not dry_run:
        attempts += _erasures_leftovers_prune(cutoff=cutoff, batch_size=batch_size)
        digest_deliveries, digest_attempts = _digests_prune(cutoff=cutoff, batch_size=batch_size)
        deliveries += digest_deliveries
        attempts += digest_attempts
    return PruneBatch(events=events, deliveries=deliveries, attempts=attempts, next=following)


def history_prune_batches(
    *,
    cutoff: datetime,
    batch_size: int = PRUNE_BATCH_SIZE,
    dry_run: bool = False,
    start: PrunePosition | None = None,
    rest: float = 0.0,
) -> Iterator[PruneBatch]:
    """Delete handled events with a target before `cutoff` batch by batch, from `start` (or the beginning).

    Each batch is committed before it is yielded, so stopping between batches
    (a time box, Ctrl-C) leaves nothing half done. With `dry_run` each batch
    counts its events, deliveries and attempts instead, and nothing is locked
    or deleted. After each batch that found rows, the generator rests `rest`
    times as long as the batch took, leaving the database to the claims.
    """
    position: PrunePosition | None = start or PrunePosition(status=_PRUNED_STATUSES[0])
    while position is not None:
        started = time.monotonic()
        batch = _prune_batch(cutoff=cutoff, position=position, batch_size=batch_size, dry_run=dry_run)
        if rest and batch.events:
            time.sleep(rest * (time.monotonic() - started))
        position = batch.next
        yield batch


def history_prune(
    *,
    cutoff: datetime,
    seconds: float,
    batch_size: int = PRUNE_BATCH_SIZE,
    start: PrunePosition | None = None,
    interrupted: Callable[[], bool] = lambda: False,
) -> PruneTotals:
    """Delete batch after batch from `start` while the next one should end within `seconds` (the first always runs).

    `interrupted` is asked between batches; True ends the pass there. The
    totals' `next` says where to continue; None when the pass reached its end.
    """
    deadline = time.monotonic() + seconds
    totals = NO_PRUNE
    longest = 0.0
    batches = history_prune_batches(cutoff=cutoff, batch_size=batch_size, start=start)
    while True:
        started = time.monotonic()
        if totals.batches and (started + longest > deadline or interrupted()):
            return totals
        batch = next(batches, None)
        if batch is None:
            return totals
        longest = max(longest, time.monotonic() - started)
        totals = totals.plus(batch)
