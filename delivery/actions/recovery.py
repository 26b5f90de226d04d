"""A destination's recovery: every delivery it got (or gave up on) between two instants, queued again.

For a receiver that lost what it had accepted (it answered 200 and dropped
the messages), or that was down past the retry window: the operator names the
destination, the states (DEAD, DELIVERED or both) and the window [since,
until) on the time each delivery reached that state (its updated_at: for
DELIVERED when the receiver's answer was recorded, for DEAD when it was given
up). The request only counts and records (`recovery_create`, after
`recovery_preview` showed the same count); the workers do the work, a batch a
turn (`recoveries_advance`), each batch in one short transaction that queues
its deliveries again (delivery.actions.requeue, as a resend does: same
idempotency key, fresh attempts, the destination's URL and format as they are
now), reopens their events and records the progress, so a worker killed or a
database lost mid-way costs at most the batch under way, which the next
worker does again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from delivery.actions.requeue import deliveries_requeue, events_reopen
from delivery.models import (
    RECOVERABLE_STATUSES,
    Delivery,
    DeliveryStatus,
    Destination,
    Recovery,
    RecoveryStatus,
)
from delivery.selectors import recovery_count
from runtime.sql import execute
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.exceptions import InvalidStateTransition
from scheduling.handlers import get_handler
from scheduling.models import Event
from scheduling.selectors import message_templates
from scheduling.state_machine import StateMachine
from users.models import User

logger = logging.getLogger(__name__)

ACTIVE = (RecoveryStatus.PENDING, RecoveryStatus.RUNNING)

# The state machine: each move and what makes it.
RECOVERY_TRANSITIONS = StateMachine(
    {
        (RecoveryStatus.PENDING, RecoveryStatus.RUNNING): "a worker queued its first batch again",
        (RecoveryStatus.PENDING, RecoveryStatus.FINISHED): (
            "a worker found nothing left in its window (all of it gone or sent again meanwhile)"
        ),
        (RecoveryStatus.RUNNING, RecoveryStatus.FINISHED): "a worker found nothing left in its window",
        (RecoveryStatus.PENDING, RecoveryStatus.CANCELLED): "an operator stopped it before it began",
        (RecoveryStatus.RUNNING, RecoveryStatus.CANCELLED): (
            "an operator stopped it; what was queued again by then still goes"
        ),
    }
)


class RecoveryRefused(Exception):
    """The destination cannot be recovered now: disabled, or another recovery of it is running."""


@dataclass(frozen=True)
class RecoveryValues:
    """A recovery's request, checked: what the preview counts and the creation records."""

    states: tuple[str, ...]
    since: datetime
    until: datetime


def recovery_values_clean(
    *, states: Sequence[str], since: datetime | None, until: datetime | None, now: datetime
) -> RecoveryValues:
    """The values asked for, checked; ValidationError naming every field at fault."""
    errors: dict[str, list[str]] = {}
    states = list(states or [])
    if not states:
        errors["states"] = ["Name the states to recover: DEAD, DELIVERED or both."]
    elif unfinished := [s for s in states if s in (DeliveryStatus.QUEUED, DeliveryStatus.SENDING)]:
        errors["states"] = [
            f"{', '.join(unfinished)}: those deliveries are still on their way; only DEAD and DELIVERED ones "
            "can be recovered."
        ]
    elif wrong := [s for s in states if s not in RECOVERABLE_STATUSES]:
        errors["states"] = [f"Not a delivery state: {', '.join(map(str, wrong))} (DEAD or DELIVERED)."]
    elif len(set(states)) != len(states):
        errors["states"] = ["A state is named twice."]
    for name, value in (("since", since), ("until", until)):
        if value is None:
            errors[name] = ["An instant is required."]
        elif timezone.is_naive(value):
            errors[name] = ["Give the instant with its UTC offset (2026-11-24T08:00:00+01:00, or Z for UTC)."]
    if "since" not in errors and since is not None and since >= now:
        errors["since"] = ["In the future: nothing has ended then yet."]
    if (
        "since" not in errors
        and "until" not in errors
        and since is not None
        and until is not None
        and not since < until
    ):
        errors["until"] = ["Must be after since."]
    if errors:
        raise ValidationError(errors)
    assert since is not None and until is not None  # else errors named them
    # Stored in the order of the model's choices, whatever order they were given in.
    ordered = tuple(s for s in RECOVERABLE_STATUSES if s in states)
    return RecoveryValues(states=ordered, since=since, until=until)


def recovery_preview(
    *, destination: Destination, states: Sequence[str], since: datetime | None, until: datetime | None
) -> int:
    """How many deliveries a recovery with these values would queue again: what the operator is shown first."""
    now = timezone.now()
    values = recovery_values_clean(states=states, since=since, until=until, now=now)
    return recovery_count(destination_id=destination.pk, before=now, **values.__dict__)


def recovery_create(
    *,
    destination: Destination,
    operator: str,
    states: Sequence[str],
    since: datetime | None,
    until: datetime | None,
) -> Recovery:
    """Record a recovery of `destination` for the workers, counted now; it queues nothing itself.

    Refused (ValidationError) when there is nothing to recover, and
    (RecoveryRefused) for a disabled destination (enable it first: disabled
    says nothing new goes there) or one another recovery is running for.
    A paused destination is accepted: its deliveries are queued and wait for
    the resume.
    """
    now = timezone.now()
    values = recovery_values_clean(states=states, since=since, until=until, now=now)
    current = _destination_recoverable(destination=destination)
    total = recovery_count(destination_id=current.pk, before=now, **values.__dict__)
    if total == 0:
        raise ValidationError(
            {
                "non_field_errors": [
                    f"No {' or '.join(values.states)} delivery of {current.name} reached that state between "
                    f"{values.since.isoformat()} and {values.until.isoformat()}: nothing to recover."
                ]
            }
        )
    recovery = _recovery_insert(destination=current, values=values, operator=operator, now=now, total=total)
    logger.info(
        "Recovery of destination asked by %s: %s deliveries",
        operator,
        total,
        extra={
            "destination": current.name,
            "operator": operator,
            "recovery_id": recovery.pk,
            "total": total,
            "states": list(values.states),
            "since": values.since.isoformat(),
            "until": values.until.isoformat(),
        },
    )
    return recovery


def _destination_recoverable(*, destination: Destination) -> Destination:
    """The destination as it is now; refused (RecoveryRefused) if disabled: disabled says nothing new goes there."""
    current = Destination.objects.filter(pk=destination.pk).first()
    if current is None:
        raise Destination.DoesNotExist(f"Destination {destination.pk} no longer exists.")
    if not current.enabled:
        raise RecoveryRefused(
            f"Destination {current.name} is disabled: enable it before recovering its deliveries."
        )
    return current


def _recovery_insert(
    *, destination: Destination, values: RecoveryValues, operator: str, now: datetime, total: int
) -> Recovery:
    """The recovery's row, and the workers woken at commit; RecoveryRefused if another one of it is active."""
    try:
        with transaction.atomic():
            recovery = Recovery.objects.create(
                destination=destination,
                states=list(values.states),
                since=values.since,
                until=values.until,
                requested_by=operator,
                requested_at=now,
                total=total,
            )
            notify(WORKER_CHANNEL)  # sent at commit
    except IntegrityError:
        if Recovery.objects.filter(destination=destination, status__in=ACTIVE).exists():
            raise RecoveryRefused(
                f"A recovery of {destination.name} is already under way: let it finish or cancel it first."
            ) from None
        raise
    return recovery


def recovery_cancel(*, recovery: Recovery, operator: str) -> Recovery:
    """Stop a recovery that has not finished: what was queued again by now still goes, nothing more is."""
    now = timezone.now()
    with transaction.atomic():
        # Waits for a worker's batch under way: it commits whole, or not at all.
        current = Recovery.objects.select_for_update().get(pk=recovery.pk)
        recoveries_transition(recovery=current, target=RecoveryStatus.CANCELLED, changes={"finished_at": now})
    logger.info(
        "Recovery cancelled by %s after %s of %s deliveries",
        operator,
        current.done,
        current.total,
        extra={"operator": operator, "recovery_id": current.pk, "done": current.done, "total": current.total},
    )
    return current


def recoveries_transition(*, recovery: Recovery, target: str, changes: dict[str, Any] | None = None) -> None:
    """Move `recovery` from the status it was read at to `target`: one UPDATE conditional on that status.

    InvalidStateTransition if the table has no such move, or if the row is no
    longer at that status (someone else moved it first).
    """
    source = recovery.status
    RECOVERY_TRANSITIONS.refuse_unless(source=source, target=target, mover=f"Recovery {recovery.pk}")
    changes = {**(changes or {}), "status": target, "updated_at": timezone.now()}
    if not Recovery.objects.filter(pk=recovery.pk, status=source).update(**changes):
        raise InvalidStateTransition(f"Recovery {recovery.pk} is no longer {source}.")
    for name, value in changes.items():
        setattr(recovery, name, value)


@dataclass(frozen=True)
class RecoveryBatch:
    """What one batch did: the recovery, how many it queued again and skipped, and whether more is left."""

    recovery: Recovery
    requeued: int
    skipped: int
    more: bool


def recoveries_advance(*, batch_size: int | None = None) -> RecoveryBatch | None:
    """Queue the next batch of the oldest unfinished recovery no other worker holds; None if there is none.

    One short transaction: the recovery's row locked (SKIP LOCKED, so two
    workers never do the same batch; a second one takes another recovery or
    nothing), the next `batch_size` deliveries of its window after its cursor
    read, their events locked in id order (the order conclude and a resend
    lock them in), the deliveries locked (SKIP LOCKED: one an erasure or a
    resend holds is passed over, and counted skipped) and queued again in one
    UPDATE per state, their ended events reopened, the progress and cursor
    written. A recovery with nothing left after its cursor is FINISHED, the
    deliveries it counted but never reached counted as skipped.
    """
    batch_size = batch_size or settings.DELIVERY_RECOVERY_BATCH
    now = timezone.now()
    with transaction.atomic():
        recovery = (
            Recovery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("destination")
            .filter(status__in=ACTIVE)
            .order_by("requested_at", "id")
            .first()
        )
        if recovery is None:
            return None
        candidates = _next_candidates(recovery=recovery, limit=batch_size)
        if not candidates:
            _recovery_finish(recovery=recovery, now=now)
            return RecoveryBatch(recovery=recovery, requeued=0, skipped=0, more=False)
        requeued = _candidates_requeue(recovery=recovery, candidates=candidates, now=now)
        _recovery_progress(
            recovery=recovery, last=candidates[-1], done=requeued, seen=len(candidates), now=now
        )
        if requeued:
            notify(WORKER_CHANNEL)  # sent at commit
    return RecoveryBatch(recovery=recovery, requeued=requeued, skipped=len(candidates) - requeued, more=True)


def _recovery_finish(*, recovery: Recovery, now: datetime) -> None:
    """FINISHED, nothing left after its cursor: what it counted but never reached counts as skipped."""
    skipped = max(recovery.skipped, recovery.total - recovery.done)
    recoveries_transition(
        recovery=recovery, target=RecoveryStatus.FINISHED, changes={"finished_at": now, "skipped": skipped}
    )
    logger.info(
        "Recovery finished: %s deliveries queued again, %s skipped",
        recovery.done,
        recovery.skipped,
        extra={
            "recovery_id": recovery.pk,
            "destination": recovery.destination.name,
            "done": recovery.done,
            "skipped": recovery.skipped,
            "batches": recovery.batches,
        },
    )


def _recovery_progress(*, recovery: Recovery, last: _Candidate, done: int, seen: int, now: datetime) -> None:
    """Record a batch: `done` of its `seen` deliveries queued again, the cursor at `last`; RUNNING from the first."""
    progress = {
        "done": recovery.done + done,
        "skipped": recovery.skipped + seen - done,
        "batches": recovery.batches + 1,
        "cursor_status": last.status,
        "cursor_at": last.updated_at,
        "cursor_id": last.id,
    }
    if recovery.status == RecoveryStatus.PENDING:
        recoveries_transition(recovery=recovery, target=RecoveryStatus.RUNNING, changes=progress)
        return
    # Progress within RUNNING, under the row lock recoveries_advance holds: not a move of the state machine.
    Recovery.objects.filter(pk=recovery.pk).update(**progress, updated_at=now)
    for name, value in progress.items():
        setattr(recovery, name, value)


@dataclass(frozen=True)
class _Candidate:
    id: uuid.UUID
    # None: a digest's delivery, which goes again without any event to reopen.
    event_id: uuid.UUID | None
    status: str
    updated_at: datetime


def _next_candidates(*, recovery: Recovery, limit: int) -> list[_Candidate]:
    """The next `limit` deliveries of the recovery's window after its cursor, in (status, updated_at, id) order.

    Rows only ever leave the window (a write sets updated_at to a time after
    the request), so a cursor over that order sees each one at most once.
    """
    table = Delivery._meta.db_table
    after, params = "", []
    if recovery.cursor_id is not None:
        after = " AND (status, updated_at, id) > (%s, %s, %s)"
        params = [recovery.cursor_status, recovery.cursor_at, recovery.cursor_id]
    rows = execute(
        f"SELECT id, event_id, status, updated_at FROM {table} WHERE destination_id = %s AND status = ANY(%s) "
        f"AND updated_at >= %s AND updated_at < %s{after} ORDER BY status, updated_at, id LIMIT %s",
        [
            recovery.destination_id,
            list(recovery.states),
            recovery.since,
            min(recovery.until, recovery.requested_at),
            *params,
            limit,
        ],
    )
    return [_Candidate(*row) for row in rows]


def _candidates_requeue(*, recovery: Recovery, candidates: list[_Candidate], now: datetime) -> int:
    """Queue again those of `candidates` still in the window and renderable; return how many."""
    events = {
        event.id: event
        for event in Event.objects.select_for_update(of=("self",))
        .select_related("user")
        .filter(id__in=sorted({c.event_id for c in candidates if c.event_id is not None}))
        .order_by("id")
    }
    renderable = _renderable_event_ids(events=events.values())
    deliveries = list(
        Delivery.objects.select_for_update(of=("self",), skip_locked=True)
        .select_related("destination", "digest")
        .filter(
            id__in=[c.id for c in candidates if c.event_id is None or c.event_id in renderable],
            destination_id=recovery.destination_id,
            status__in=recovery.states,
            updated_at__gte=recovery.since,
            updated_at__lt=min(recovery.until, recovery.requested_at),
        )
        .order_by("id")
    )
    templates = message_templates()
    moved: set[uuid.UUID] = set()
    for state in recovery.states:
        moved.update(
            deliveries_requeue(
                source=state,
                deliveries=[d for d in deliveries if d.status == state],
                events=events,
                templates=templates,
                now=now,
            )
        )
    events_reopen(
        events=[events[d.event_id] for d in _unique_events(deliveries, moved) if d.event_id is not None],
        now=now,
    )
    return len(moved)


def _unique_events(deliveries: list[Delivery], moved: Collection[uuid.UUID]) -> list[Delivery]:
    """One moved delivery per event (a destination has at most one per event; kept safe all the same)."""
    seen, unique = set(), []
    for delivery in deliveries:
        if delivery.id in moved and delivery.event_id not in seen:
            seen.add(delivery.event_id)
            unique.append(delivery)
    return unique


def _renderable_event_ids(*, events: Collection[Event]) -> set[uuid.UUID]:
    """The events whose recipient still has an occurrence of their type (a removed anniversary date has not).

    As a resend refuses (delivery.actions.resend): nothing to celebrate, and
    no message to render. One query per event type in the batch.
    """
    renderable: set[uuid.UUID] = set()
    by_type: dict[str, list[Event]] = {}
    for event in events:
        by_type.setdefault(event.event_type, []).append(event)
    for event_type, typed in by_type.items():
        applies = set(
            User.objects.filter(
                get_handler(event_type).applies_to, pk__in=[e.user_id for e in typed]
            ).values_list("pk", flat=True)
        )
        renderable.update(e.id for e in typed if e.user_id in applies)
    return renderable
