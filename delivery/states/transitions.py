"""The Delivery state machine: which moves exist, and the one lease-checked UPDATE that does them.

Every write of Delivery.status goes through `deliveries_transition`: one
UPDATE for a whole batch, conditional on the expected status and, for a row
under lease (SENDING), on the lease: either the caller holds it (same worker,
same attempt number) or it has expired. Leaving SENDING always releases the
lease; entering it always takes a new one and counts an attempt, so the
`delivery_sending_has_lease` constraint can never be broken by a path that
forgot a column.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection, models

from delivery.models import Delivery, DeliveryStatus
from runtime.sql import column_field, rows_relation, send, waited
from scheduling.exceptions import InvalidStateTransition
from scheduling.state_machine import StateMachine

QUEUED, SENDING, DELIVERED, DEAD = (
    DeliveryStatus.QUEUED,
    DeliveryStatus.SENDING,
    DeliveryStatus.DELIVERED,
    DeliveryStatus.DEAD,
)

# The state machine: each move and what makes it.
DELIVERY_TRANSITIONS = StateMachine(
    {
        (QUEUED, SENDING): "claim: a worker leases it for one attempt",
        (SENDING, DELIVERED): "record: the receiver accepted it",
        (SENDING, QUEUED): "record: a transient failure, tried again later; release: handed back unstarted; "
        "take over: its worker was lost, tried again now",
        (SENDING, DEAD): "record: a permanent failure, or the last attempt failed",
        (DEAD, QUEUED): "resend or recovery: an operator queues it again, under the same key",
        (
            DELIVERED,
            QUEUED,
        ): "recovery: an operator queues it again, under the same key, for a receiver that lost "
        "what it had accepted",
        (
            QUEUED,
            DEAD,
        ): "expire: still waiting (on a failing or paused endpoint) EVENT_MAX_LATENESS after it was queued",
    }
)


@dataclass(frozen=True)
class Due:
    """Select QUEUED rows due by `now`, oldest first, skipping rows others hold.

    `skip_keys`: endpoints whose deliveries wait (failing, paused, throttled);
    `only_key`: one endpoint's alone (a probe).
    """

    now: datetime
    limit: int
    skip_keys: Sequence[str] = ()
    only_key: str | None = None


@dataclass(frozen=True)
class Rows:
    """Select the rows named by id, each with the attempt number the caller knows it at.

    Under lease (source SENDING), `held_by` (this worker holds the lease) or
    `expired_before` (nobody renewed it since) says whose lease may be ended.
    `values` carries one value per row for columns that differ between rows.
    """

    ids: Sequence[uuid.UUID]
    attempts: Sequence[int | None]
    held_by: str | None = None
    expired_before: datetime | None = None
    values: Mapping[str, Sequence[Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class NewLease:
    worker: str
    until: datetime


_F = {f.attname: column_field(Delivery, f.attname) for f in Delivery._meta.concrete_fields}


def _prep(name: str, value: Any) -> Any:
    return _F[name].field.get_db_prep_value(value, connection)


def start_deliveries_transition(
    *,
    source: str,
    target: str,
    select: Due | Rows,
    now: datetime,
    lease: NewLease | None = None,
    changes: Mapping[str, Any] | None = None,
    returning: Sequence[str] = ("id",),
    binary: bool = False,
) -> Callable[[], list[tuple[Any, ...]]]:
    """Send the UPDATE that moves the selected deliveries from `source` to `target`; the function returned waits
    for `returning` of each row moved.

    Rows that no longer match (another worker took the lease over, an operator
    resent, the status moved on) are simply not moved: the caller sees which
    were from what comes back.

    Inside runtime.sql.pipeline() the UPDATE runs on the server while the
    caller sends its next statements: a batch's moves of several kinds, or a
    claim behind the take-over of expired leases, cost one round trip. With
    `binary` the rows come back in PostgreSQL's binary format (runtime.sql.send),
    a JSON column among them as its text.
    """
    _check_transition(source=source, target=target, select=select, lease=lease)
    assignments, params = _shared_assignments(
        source=source, target=target, now=now, lease=lease, changes=changes
    )
    selection = _due_selection(select=select) if isinstance(select, Due) else _rows_selection(select=select)
    if selection is None:
        return list
    assignments += selection.assignments
    conditions = ["d.status = %s", *selection.conditions]
    sql = (
        f"{selection.cte}UPDATE {Delivery._meta.db_table} AS d SET {', '.join(assignments)} "
        f"FROM {selection.relation} WHERE d.id = v.v_id AND {' AND '.join(conditions)} "
        f"RETURNING {', '.join(_returned(name, binary=binary) for name in returning)}"
    )
    sent = send(
        sql,
        [*selection.cte_params, *params, *selection.relation_params, source, *selection.condition_params],
        binary=binary,
    )
    return lambda: sent()[0]


# The same, waited for at once: the rows moved.
deliveries_transition = waited(start_deliveries_transition)


def _returned(name: str, *, binary: bool) -> str:
    column, model_field = _F[name]
    # In binary, jsonb would arrive parsed; as text it is the body as stored, as Django's loader gives it.
    return f"d.{column}::text" if binary and isinstance(model_field, models.JSONField) else f"d.{column}"


def _check_transition(*, source: str, target: str, select: Due | Rows, lease: NewLease | None) -> None:
    """Refuse a move the state machine has not, and one that takes or ends a lease where it must not."""
    DELIVERY_TRANSITIONS.refuse_unless(source=source, target=target, mover="A delivery")
    under_lease = isinstance(select, Rows) and (
        select.held_by is not None or select.expired_before is not None
    )
    if (source == SENDING) != under_lease:
        raise InvalidStateTransition(
            f"{source} -> {target}: a delivery under lease is moved only by its holder or after the lease expired."
        )
    if (target == SENDING) != (lease is not None):
        raise InvalidStateTransition(f"{source} -> {target}: entering SENDING takes a lease, and only then.")


def _shared_assignments(
    *, source: str, target: str, now: datetime, lease: NewLease | None, changes: Mapping[str, Any] | None
) -> tuple[list[str], list[Any]]:
    """The SET clause's assignments of the values every row shares, and their parameters.

    The new status; the lease taken (and an attempt counted) on entering
    SENDING, or released on leaving it; then `changes`.
    """
    assignments = ["status = %s", "updated_at = %s"]
    params: list[Any] = [target, _prep("updated_at", now)]
    if lease is not None:
        assignments += [
            "attempts = d.attempts + 1",
            "locked_by = %s",
            "locked_until = %s",
            "attempt_started_at = %s",
        ]
        params += [lease.worker, _prep("locked_until", lease.until), _prep("attempt_started_at", now)]
    elif source == SENDING:
        assignments += ["locked_by = ''", "locked_until = NULL"]
    for name, value in (changes or {}).items():
        assignments.append(f"{_F[name].column} = %s")
        params.append(_prep(name, value))
    return assignments, params


class _Selection(NamedTuple):
    """Which rows the UPDATE moves: a WITH clause, the relation v (FROM) with v.v_id, and conditions on d.

    `assignments` set columns from the relation's per-row values.
    """

    cte: str
    cte_params: list[Any]
    relation: str
    relation_params: list[Any]
    assignments: list[str]
    conditions: list[str]
    condition_params: list[Any]


def _due_selection(*, select: Due) -> _Selection:
    """The oldest QUEUED rows due by `select.now`, up to its limit, skipping rows others hold."""
    table = Delivery._meta.db_table
    # A materialised CTE, not a sub-select in FROM: PostgreSQL may run a
    # sub-select once per outer row of a nested loop, and with SKIP LOCKED
    # each run returns other rows, so LIMIT would stop limiting.
    endpoint_filter, endpoint_params = "", []
    if select.only_key is not None:
        endpoint_filter, endpoint_params = " AND endpoint_key = %s", [select.only_key]
    elif select.skip_keys:
        endpoint_filter = f" AND endpoint_key NOT IN ({', '.join(['%s'] * len(select.skip_keys))})"
        endpoint_params = list(select.skip_keys)
    cte = (
        f"WITH v AS MATERIALIZED (SELECT id AS v_id FROM {table} WHERE status = %s AND next_attempt_at <= %s"
        f"{endpoint_filter} ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED) "
    )
    cte_params = [QUEUED, _prep("next_attempt_at", select.now), *endpoint_params, select.limit]
    return _Selection(
        cte=cte,
        cte_params=cte_params,
        relation="v",
        relation_params=[],
        assignments=[],
        conditions=[],
        condition_params=[],
    )


def _rows_selection(*, select: Rows) -> _Selection | None:
    """The rows named by id, each at the attempt number given, under the lease described; None if none are."""
    # Relation columns are prefixed so RETURNING can name the table's own
    # columns unqualified: an `id` of both would be ambiguous.
    columns = [("v_id", _F["id"].field), ("v_attempt", _F["attempts"].field)]
    columns += [(f"v_{name}", _F[name].field) for name in select.values]
    rows = list(zip(select.ids, select.attempts, *select.values.values(), strict=True))
    if not rows:
        return None
    relation, relation_params = rows_relation("v", columns, rows)
    conditions = ["(v.v_attempt IS NULL OR d.attempts = v.v_attempt)"]
    condition_params: list[Any] = []
    if select.held_by is not None:
        conditions.append("d.locked_by = %s")
        condition_params.append(select.held_by)
    if select.expired_before is not None:
        conditions.append("d.locked_until < %s")
        condition_params.append(_prep("locked_until", select.expired_before))
    return _Selection(
        cte="",
        cte_params=[],
        relation=relation,
        relation_params=relation_params,
        assignments=[f"{_F[name].column} = v.v_{name}" for name in select.values],
        conditions=conditions,
        condition_params=condition_params,
    )
