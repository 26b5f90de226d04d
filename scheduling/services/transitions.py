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
from dataclasses import dataclass
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
    move = _Move(
        events=events,
        source=source,
        target=target,
        now=now or timezone.now(),
        changes=dict(changes or {}),
        per_event=dict(per_event or {}),
        condition=condition,
    )
    sent = send(*move.sql())

    def moved() -> list[uuid.UUID]:
        rows, _count = sent()
        ids = [_ID.to_python(row[0]) for row in rows]
        if strict and len(ids) != len(events):
            raise move.lost_error(moved_ids=ids)
        move.instances_follow()
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


@dataclass(frozen=True)
class _Move:
    """One conditional UPDATE's move of `events` from `source` to `target`, and what it writes."""

    events: Sequence[EventRef | Event]
    source: str
    target: str
    now: datetime
    changes: Mapping[str, Any]
    per_event: Mapping[str, Sequence[Any]]
    condition: tuple[str, Sequence[Any]] | None

    def sql(self) -> tuple[str, list[Any]]:
        """The UPDATE that moves the events, returning the ids it moved, and its parameters."""
        # The relation's columns are prefixed so that RETURNING can name the
        # table's own columns unqualified: an `id` of both would be ambiguous.
        columns = [("v_id", _ID), ("v_version", _VERSION)]
        columns += [(f"v_{name}", column_field(Event, name).field) for name in self.per_event]
        rows = list(
            zip(
                [event.id for event in self.events],
                [event.version for event in self.events],
                *self.per_event.values(),
                strict=True,
            )
        )
        relation, relation_params = rows_relation("v", columns, rows)
        assignments = ["status = %s", "version = e.version + 1", "updated_at = %s"]
        params: list[Any] = [
            self.target,
            column_field(Event, "updated_at").field.get_db_prep_value(self.now, connection),
        ]
        for name, value in self.changes.items():
            column, field = column_field(Event, name)
            assignments.append(f"{column} = %s")
            params.append(field.get_db_prep_value(value, connection))
        assignments += [f"{column_field(Event, name).column} = v.v_{name}" for name in self.per_event]
        condition = self.condition
        sql = (
            f"UPDATE {Event._meta.db_table} AS e SET {', '.join(assignments)} FROM {relation} "
            "WHERE e.id = v.v_id AND e.status = %s AND (v.v_version IS NULL OR e.version = v.v_version)"
            + (f" AND ({condition[0]})" if condition is not None else "")
            + " RETURNING id"
        )
        return sql, [*params, *relation_params, self.source, *(condition[1] if condition is not None else ())]

    def lost_error(self, *, moved_ids: list[uuid.UUID]) -> OptimisticLockError:
        moved = set(moved_ids)
        lost = [event for event in self.events if event.id not in moved]
        return OptimisticLockError(
            f"{len(lost)} of {len(self.events)} events changed since they were read (expected status "
            f"{self.source}); first: event {lost[0].id} at version {lost[0].version}."
        )

    def instances_follow(self) -> None:
        """The model instances among the events take the values their rows now hold."""
        for event in self.events:
            if isinstance(event, Event):
                event.status = self.target
                event.version += 1
                event.updated_at = self.now
                for name, value in self.changes.items():
                    setattr(event, name, value)
        for name, values in self.per_event.items():
            for event, value in zip(self.events, values, strict=True):
                if isinstance(event, Event):
                    setattr(event, name, value)
