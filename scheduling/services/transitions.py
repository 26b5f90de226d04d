"""The event state machine: which moves exist, who may make them, and the one UPDATE that does.

Every change of Event.status goes through `events_transition` (or
`start_events_transition`, the same UPDATE sent now and checked later): one conditional
UPDATE for a whole batch, matching each row on its id, the expected status and
(where the caller read it) the version, and bumping the version. Of two
processes holding the same version only one can win; the other learns it from
OptimisticLockError.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from runtime.sql import column_field, rows_relation, send, waited
from scheduling.exceptions import InvalidStateTransition, OptimisticLockError
from scheduling.models import Event, EventStatus
from scheduling.state_machine import StateMachine


class Actor(enum.StrEnum):
    """Who makes a move. Each move belongs to one actor, so no path can take another's."""

    SCHEDULER = "scheduler"
    WORKER = "worker"
    OPERATOR = "operator"


# The state machine: each move and the one actor who makes it.
EVENT_TRANSITIONS = StateMachine(
    {
        # Claimed when due: its delivery is queued in the same transaction.
        (EventStatus.PENDING, EventStatus.PROCESSING): Actor.SCHEDULER,
        # Claimed later than EVENT_MAX_LATENESS, or while its recipient or its type
        # was paused (scheduling.pauses): never sent, failed at once.
        (EventStatus.PENDING, EventStatus.FAILED): Actor.SCHEDULER,
        # Claimed when no enabled destination subscribes to its type: nothing to send.
        (EventStatus.PENDING, EventStatus.COMPLETED): Actor.SCHEDULER,
        # Its last delivery ended, and every one was accepted by its receiver.
        (EventStatus.PROCESSING, EventStatus.COMPLETED): Actor.WORKER,
        # Its last delivery ended, and one or more died (a permanent failure, every
        # attempt used, or too late): the reason names their destinations.
        (EventStatus.PROCESSING, EventStatus.FAILED): Actor.WORKER,
        # Its dead deliveries sent again under the same idempotency key (support
        # cases: the receiver was down for days, a bug was fixed). Only an operator may, so no
        # automatic path (scheduler, worker, user edits) can ever take it.
        (EventStatus.FAILED, EventStatus.PROCESSING): Actor.OPERATOR,
        # A delivery it had delivered sent again under the same idempotency key (a
        # destination's recovery: its receiver lost what it had accepted). Only an
        # operator asks for it; a worker carries it out on their behalf.
        (EventStatus.COMPLETED, EventStatus.PROCESSING): Actor.OPERATOR,
    }
)


class EventRef:
    """An event as a caller read it: its id, and the version read (None: status alone decides)."""

    __slots__ = ("id", "version")

    def __init__(self, id: uuid.UUID, version: int | None = None) -> None:  # noqa: A002 - the column's name
        self.id = id
        self.version = version


_ID = column_field(Event, "id").field
_VERSION = column_field(Event, "version").field


def start_events_transition(
    *,
    events: Sequence[EventRef | Event],
    source: str,
    target: str,
    actor: Actor,
    now: datetime | None = None,
    changes: Mapping[str, Any] | None = None,
    per_event: Mapping[str, Sequence[Any]] | None = None,
    strict: bool = True,
    condition: tuple[str, Sequence[Any]] | None = None,
) -> Callable[[], list[uuid.UUID]]:
    """Send the UPDATE that moves `events` from `source` to `target`; the function returned waits for it.

    That function returns the ids moved. Inside runtime.sql.pipeline() the
    UPDATE runs on the server while the caller prepares its next statements.
    `changes` sets the same value on every row; `per_event` gives one value per
    event (in the order of `events`) for columns that differ between rows. With
    `strict`, a row that no longer matches (another process moved it, or a
    newer version exists) raises OptimisticLockError and, in the caller's
    transaction, nothing moves; without it the ids that did move are returned
    and the caller decides. `condition` (SQL on the event as `e`, and its parameters) narrows the
    rows moved further, for a caller that knows more of when a move holds (delivery.states.conclude).
    """
    _check_transition(events=events, source=source, target=target, actor=actor)
    if not events:
        return lambda: []
    now = now or timezone.now()
    changes = dict(changes or {})
    per_event = dict(per_event or {})
    sql, params = _transition_update(
        events=events,
        source=source,
        target=target,
        now=now,
        changes=changes,
        per_event=per_event,
        condition=condition,
    )
    sent = send(sql, params)

    def moved() -> list[uuid.UUID]:
        rows, _count = sent()
        ids = [_ID.to_python(row[0]) for row in rows]
        if strict and len(ids) != len(events):
            raise _lost_events_error(events=events, moved_ids=ids, source=source)
        _instances_follow(events=events, target=target, now=now, changes=changes, per_event=per_event)
        return ids

    return moved


# Move `events` from `source` to `target` with one conditional UPDATE; return the ids moved: the same as
# start_events_transition with the same arguments, waited for at once.
events_transition = waited(start_events_transition)


def _check_transition(*, events: Sequence[EventRef | Event], source: str, target: str, actor: Actor) -> None:
    """Refuse a move the state machine has not, or not for `actor`, and model instances not at `source`."""
    first = events[0] if events else None
    EVENT_TRANSITIONS.refuse_unless(
        source=source,
        target=target,
        actor=actor,
        mover=f"Event {getattr(first, 'id', '')} (version {getattr(first, 'version', '')})",
    )
    for event in events:
        if isinstance(event, Event) and event.status != source:
            raise InvalidStateTransition(
                f"Event {event.id} (version {event.version}) cannot move from {event.status} to {target}."
            )


def _transition_update(
    *,
    events: Sequence[EventRef | Event],
    source: str,
    target: str,
    now: datetime,
    changes: Mapping[str, Any],
    per_event: Mapping[str, Sequence[Any]],
    condition: tuple[str, Sequence[Any]] | None = None,
) -> tuple[str, list[Any]]:
    """The conditional UPDATE that moves `events`, returning the ids it moved, and its parameters."""
    # The relation's columns are prefixed so that RETURNING can name the
    # table's own columns unqualified: an `id` of both would be ambiguous.
    columns = [("v_id", _ID), ("v_version", _VERSION)]
    columns += [(f"v_{name}", column_field(Event, name).field) for name in per_event]
    rows = list(
        zip(
            [event.id for event in events],
            [event.version for event in events],
            *per_event.values(),
            strict=True,
        )
    )
    relation, relation_params = rows_relation("v", columns, rows)
    assignments = ["status = %s", "version = e.version + 1", "updated_at = %s"]
    params: list[Any] = [target, column_field(Event, "updated_at").field.get_db_prep_value(now, connection)]
    for name, value in changes.items():
        column, field = column_field(Event, name)
        assignments.append(f"{column} = %s")
        params.append(field.get_db_prep_value(value, connection))
    assignments += [f"{column_field(Event, name).column} = v.v_{name}" for name in per_event]
    sql = (
        f"UPDATE {Event._meta.db_table} AS e SET {', '.join(assignments)} FROM {relation} "
        "WHERE e.id = v.v_id AND e.status = %s AND (v.v_version IS NULL OR e.version = v.v_version)"
        + (f" AND ({condition[0]})" if condition is not None else "")
        + " RETURNING id"
    )
    return sql, [*params, *relation_params, source, *(condition[1] if condition is not None else ())]


def _lost_events_error(
    *, events: Sequence[EventRef | Event], moved_ids: list[uuid.UUID], source: str
) -> OptimisticLockError:
    moved = set(moved_ids)
    lost = [event for event in events if event.id not in moved]
    return OptimisticLockError(
        f"{len(lost)} of {len(events)} events changed since they were read (expected status {source}); "
        f"first: event {lost[0].id} at version {lost[0].version}."
    )


def _instances_follow(
    *,
    events: Sequence[EventRef | Event],
    target: str,
    now: datetime,
    changes: Mapping[str, Any],
    per_event: Mapping[str, Sequence[Any]],
) -> None:
    """The model instances among `events` take the values their rows now hold."""
    for event in events:
        if isinstance(event, Event):
            event.status = target
            event.version += 1
            event.updated_at = now
            for name, value in changes.items():
                setattr(event, name, value)
    for name, values in per_event.items():
        for event, value in zip(events, values, strict=True):
            if isinstance(event, Event):
                setattr(event, name, value)
