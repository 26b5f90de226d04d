"""Reads of deliveries and attempts, for the console and the worker."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from delivery.models import (
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Destination,
    DestinationOptOut,
    Digest,
    FailureAcknowledgement,
    Recovery,
)
from delivery.rules import failure_causes as failures
from kinds import STANDARD
from runtime.aggregates import counts_by, estimated_counts_by
from scheduling.admin_log import admin_log_export


def destination_opt_outs_export(*, user_id: uuid.UUID) -> list[dict[str, Any]]:
    """The destinations the person opted out of: each one's id and name, when, and by whom."""
    return [
        dict(row)
        for row in DestinationOptOut.objects.filter(user_id=user_id)
        .order_by("created_at", "id")
        .values("destination_id", "destination__name", "created_at", "changed_by", "actor")
    ]


def digests_export(*, user_id: uuid.UUID) -> list[dict[str, Any]]:
    """The daily digests naming the recipient: each one's date, destination, delivery's state and their lines."""
    wanted = str(user_id)
    found = (
        Digest.objects.filter(entries__contains=[{"user_id": wanted}])
        .annotate(
            delivery_status=Subquery(Delivery.objects.filter(digest=OuterRef("pk")).values("status")[:1])
        )
        .order_by("local_date", "id")
    )
    return [
        {
            "destination_id": digest.destination_id,
            "local_date": digest.local_date,
            "idempotency_key": digest.idempotency_key,
            "delivery_status": digest.delivery_status,
            "entries": [entry for entry in digest.entries if entry.get("user_id") == wanted],
        }
        for digest in found
    ]


# A DELIVERED row whose success wrote no attempt row (Delivery.delivered_duration_ms): its attempt is the row's own.
SUCCESS_ON_DELIVERY = Q(status=DeliveryStatus.DELIVERED, delivered_duration_ms__isnull=False)

# The attempt log's columns as a success recorded on its delivery gives them: the delivery's column of each,
# then the values every such success has. The one place that says so, for the readers (delivery_attempts)
# and for the write that makes one a row (delivery.states.successes).
SUCCESS_ATTEMPT_COLUMNS: Mapping[str, str] = {
    "delivery_id": "id",
    "number": "attempts",
    "worker": "delivered_by",
    "started_at": "attempt_started_at",
    "finished_at": "delivered_at",
    "duration_ms": "delivered_duration_ms",
    "status_code": "last_status_code",
    "response_excerpt": "delivered_response",
}
SUCCESS_ATTEMPT_VALUES: Mapping[str, object] = {
    "outcome": AttemptOutcome.DELIVERED,
    # A success has no error of its own (delivery.receivers.transport: its detail is empty).
    "error": "",
    # What it led to (delivery.rules.attempt_words): it counted, and its delivery was DELIVERED.
    "counted": True,
    "delivery_status_after": DeliveryStatus.DELIVERED,
}


def delivery_success_attempt(delivery: Mapping[str, Any]) -> dict[str, Any]:
    """The attempt of a success recorded on its delivery (`delivery`: its columns by name), as a row's values.

    Its `id` is None: it has no row of its own (a move out of DELIVERED, or an erasure, writes one).
    """
    return {
        "id": None,
        **{name: delivery[column] for name, column in SUCCESS_ATTEMPT_COLUMNS.items()},
        **SUCCESS_ATTEMPT_VALUES,
    }


def delivery_attempts(*, delivery_ids: Collection[uuid.UUID]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """Each delivery's attempts, first to last, as the attempt log's rows (dicts of its columns).

    The rows, and for a delivery whose success wrote none (SUCCESS_ON_DELIVERY) that success
    from its own columns: every reader of attempts (the console, the export, the API) reads
    them here, so each shows the same attempts whichever way they were recorded.
    """
    ids = list(delivery_ids)
    attempts: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for attempt in (
        DeliveryAttempt.objects.filter(delivery_id__in=ids).order_by("delivery_id", "number").values()
    ):
        attempts.setdefault(attempt["delivery_id"], []).append(dict(attempt))
    successes = Delivery.objects.filter(SUCCESS_ON_DELIVERY, id__in=ids).values(
        *SUCCESS_ATTEMPT_COLUMNS.values()
    )
    for delivery in successes:
        attempts.setdefault(delivery["id"], []).append(delivery_success_attempt(delivery))
    return attempts


def deliveries_export(*, event_ids: Collection[uuid.UUID]) -> list[dict[str, Any]]:
    """Every delivery of these events with its attempts and the console's log of it, as JSON-ready dicts.

    Each delivery's columns keep their names (`attempts` is its count); its attempt rows are under
    `attempt_log`, and the console's log under `console_log`, names no column has.
    """
    deliveries = list(
        Delivery.objects.filter(event_id__in=list(event_ids)).order_by("created_at", "id").values()
    )
    attempts = delivery_attempts(delivery_ids=[d["id"] for d in deliveries])
    return [
        {
            **delivery,
            "attempt_log": attempts.get(delivery["id"], []),
            "console_log": admin_log_export(model=Delivery, object_ids=[delivery["id"]]),
        }
        for delivery in deliveries
    ]


def next_retry_at() -> datetime | None:
    """When the earliest QUEUED delivery is due (an idle worker sleeps until then)."""
    first: datetime | None = Delivery.objects.filter(status=DeliveryStatus.QUEUED).aggregate(
        first=Min("next_attempt_at")
    )["first"]
    return first


def delivery_outcome_counts(*, now: datetime) -> dict[str, int]:
    """Deliveries that ended DELIVERED or DEAD, and attempts made, in the last hour and day.

    A delivery's updated_at is when it reached its final state; the range scan on
    (status, updated_at) reads only the last day's finished rows. Attempts are
    counted by finished_at (attempt_finished_idx).
    """
    hour_ago, day_ago = now - timedelta(hours=1), now - timedelta(days=1)
    finished = Delivery.objects.filter(
        status__in=[DeliveryStatus.DELIVERED, DeliveryStatus.DEAD], updated_at__gt=day_ago
    ).aggregate(
        delivered_hour=Count("id", filter=Q(status=DeliveryStatus.DELIVERED, updated_at__gt=hour_ago)),
        delivered_day=Count("id", filter=Q(status=DeliveryStatus.DELIVERED)),
        dead_hour=Count("id", filter=Q(status=DeliveryStatus.DEAD, updated_at__gt=hour_ago)),
        dead_day=Count("id", filter=Q(status=DeliveryStatus.DEAD)),
        # The successes recorded on their delivery, attempts with no row (delivery_attempts): a
        # success's delivered_at is its answer's time, never after the row's updated_at.
        successes_hour=Count("id", filter=SUCCESS_ON_DELIVERY & Q(delivered_at__gt=hour_ago)),
        successes_day=Count("id", filter=SUCCESS_ON_DELIVERY & Q(delivered_at__gt=day_ago)),
    )
    successes_hour, successes_day = finished.pop("successes_hour"), finished.pop("successes_day")
    attempts = DeliveryAttempt.objects.filter(finished_at__gt=day_ago).aggregate(
        attempts_hour=Count("id", filter=Q(finished_at__gt=hour_ago)),
        attempts_day=Count("id"),
        failed_attempts_hour=Count(
            "id",
            filter=Q(finished_at__gt=hour_ago) & ~Q(outcome=AttemptOutcome.DELIVERED),
        ),
        failed_attempts_day=Count("id", filter=~Q(outcome=AttemptOutcome.DELIVERED)),
    )
    attempts["attempts_hour"] += successes_hour
    attempts["attempts_day"] += successes_day
    return {**finished, **attempts}


def delivery_backlog_counts() -> dict[str, int]:
    """Deliveries waiting (QUEUED) and under a worker's lease (SENDING)."""
    return Delivery.objects.filter(status__in=[DeliveryStatus.QUEUED, DeliveryStatus.SENDING]).aggregate(
        queued=Count("id", filter=Q(status=DeliveryStatus.QUEUED)),
        sending=Count("id", filter=Q(status=DeliveryStatus.SENDING)),
    )


def delivery_status_estimates() -> dict[str, int]:
    """PostgreSQL's estimate of the deliveries in each status (runtime.aggregates.estimated_counts_by): no row read.

    For the finished history (DELIVERED, DEAD), whose exact count would read
    all of it on every scrape; delivery_backlog_counts counts the unfinished
    ones exactly, delivery_finished_counts what finished lately.
    """
    return estimated_counts_by(Delivery, field="status", keys=DeliveryStatus.values)


def delivery_finished_counts(*, since: datetime) -> dict[str, int]:
    """Deliveries that became DELIVERED or DEAD after `since` (both present, zero if none).

    A delivery's updated_at is when it reached its final state; each status is
    a range of (status, updated_at) from `since`, so only what finished lately
    is read. A DEAD delivery resent since is QUEUED again and not counted.
    """
    finished = [DeliveryStatus.DELIVERED, DeliveryStatus.DEAD]
    return counts_by(
        Delivery.objects.filter(status__in=finished, updated_at__gt=since), field="status", keys=finished
    )


@dataclass(frozen=True)
class DueSummary:
    count: int
    oldest: datetime | None


def delivery_due_summary(*, now: datetime) -> DueSummary:
    """QUEUED deliveries whose next attempt is due, and the earliest such time.

    A range of delivery_queued_due_idx, the index the workers claim from.
    """
    row = Delivery.objects.filter(status=DeliveryStatus.QUEUED, next_attempt_at__lte=now).aggregate(
        count=Count("*"), oldest=Min("next_attempt_at")
    )
    return DueSummary(count=row["count"], oldest=row["oldest"])


def attempt_outcome_counts(*, since: datetime) -> dict[str, int]:
    """Attempts that finished after `since`, by outcome (every outcome present, zero if none).

    Read from the attempt log, so it covers every worker, including attempts
    logged as abandoned by the worker that took over from a lost one, and from
    the deliveries whose success is recorded on them (delivery_attempts).
    """
    counts = counts_by(
        DeliveryAttempt.objects.filter(finished_at__gt=since), field="outcome", keys=AttemptOutcome.values
    )
    # With the successes recorded on their delivery (delivery_attempts), a range of (status, updated_at).
    counts[AttemptOutcome.DELIVERED] += Delivery.objects.filter(
        SUCCESS_ON_DELIVERY, updated_at__gt=since, delivered_at__gt=since
    ).count()
    return counts


def recipients_attempt_count(*, user_ids: Collection[uuid.UUID]) -> int:
    """How many delivery attempts the recipients' deliveries have: what their erasure keeps, stripped (delivery.erasure)."""
    rows = DeliveryAttempt.objects.filter(delivery__event__user_id__in=user_ids).count()
    return rows + Delivery.objects.filter(SUCCESS_ON_DELIVERY, event__user_id__in=user_ids).count()


# --- recoveries ------------------------------------------------------------------------------


def recovery_deliveries(
    *, destination_id: int, states: Collection[str], since: datetime, until: datetime, before: datetime
) -> QuerySet[Delivery]:
    """The destination's deliveries in `states` that reached them in [since, until) and before `before`.

    A delivery's updated_at is when it reached its current state (its
    DELIVERED or DEAD one), so each state is a range of (status, updated_at)
    (delivery_status_updated_idx), filtered on the destination. `before` (the
    recovery's request) keeps out what ended afterwards, its own resends among them.
    """
    return Delivery.objects.filter(
        destination_id=destination_id,
        status__in=list(states),
        updated_at__gte=since,
        updated_at__lt=min(until, before),
    )


def recovery_count(
    *, destination_id: int, states: Collection[str], since: datetime, until: datetime, before: datetime
) -> int:
    """How many deliveries a recovery with these values would queue again now: what the operator confirms."""
    return recovery_deliveries(
        destination_id=destination_id, states=states, since=since, until=until, before=before
    ).count()


def recovery_list(*, destination_id: int) -> QuerySet[Recovery]:
    """The destination's recoveries, newest first."""
    return Recovery.objects.filter(destination_id=destination_id).order_by("-requested_at", "-id")


# --- failures by cause, and each destination's health ---------------------------------------

# How far back the failures list and a destination's last failure look: the dead deliveries
# of this window are a range of delivery_status_updated_idx, so a read costs what died in it,
# never the history behind it.
FAILURE_WINDOW = timedelta(days=7)
EXAMPLES_PER_GROUP = 3


@dataclass(frozen=True)
class FailureGroup:
    """The dead deliveries of one destination and one cause (delivery.rules.failure_causes) not acknowledged yet."""

    destination_id: int
    destination_name: str
    # Its kind (Destination.format): a chat service's 404 means its webhook was deleted.
    destination_format: str
    cause: str
    count: int
    count_last_hour: int
    first_seen: datetime
    last_seen: datetime
    # The latest few, newest first.
    example_ids: list[uuid.UUID]

    @property
    def label(self) -> str:
        return failures.cause_label(self.cause)

    @property
    def hint(self) -> str:
        """What the cause means and what fixes it."""
        return failures.cause_hint(self.cause, chat=self.destination_format != STANDARD.name)


def failure_groups(
    *, now: datetime, since: datetime | None = None, destination_id: int | None = None
) -> list[FailureGroup]:
    """The dead deliveries given up since `since` (FAILURE_WINDOW ago), by (destination, cause), newest group first.

    One statement: the window's DEAD rows (a range of an index of dead rows),
    their cause computed (delivery.rules.failure_causes.CAUSE_SQL), less each group's
    acknowledged part, grouped; then the destinations' names. Deliveries whose
    destination was deleted have no group: there is no receiver left to act on.
    """
    since = since or now - FAILURE_WINDOW
    table = Delivery._meta.db_table
    params: dict[str, Any] = {"dead": DeliveryStatus.DEAD, "since": since, "hour": now - timedelta(hours=1)}
    only = ""
    if destination_id is not None:
        only, params["destination_id"] = "AND d.destination_id = %(destination_id)s", destination_id
    not_acknowledged, acknowledged_params = _not_acknowledged(since=since)
    params.update(acknowledged_params)
    sql = f"""
        SELECT destination_id, cause, count(*),
               count(*) FILTER (WHERE updated_at >= %(hour)s),
               min(updated_at), max(updated_at),
               (array_agg(id ORDER BY updated_at DESC))[1:{EXAMPLES_PER_GROUP}]
        FROM (
            SELECT d.id, d.destination_id, d.updated_at, {failures.cause_sql(alias="d")} AS cause
            FROM {table} d
            WHERE d.status = %(dead)s AND d.updated_at >= %(since)s AND d.destination_id IS NOT NULL {only}
        ) d
        {not_acknowledged}
        GROUP BY destination_id, cause
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    names = {
        pk: (name, format_)
        for pk, name, format_ in Destination.objects.filter(pk__in={row[0] for row in rows}).values_list(
            "pk", "name", "format"
        )
    }
    groups = [
        FailureGroup(destination_id, *names[destination_id], cause, count, last_hour, first, last, examples)
        for destination_id, cause, count, last_hour, first, last, examples in rows
        if destination_id in names  # deleted meanwhile
    ]
    return sorted(groups, key=lambda group: (-group.last_seen.timestamp(), group.destination_id, group.cause))


def _not_acknowledged(*, since: datetime) -> tuple[str, dict[str, Any]]:
    """The WHERE clause that leaves out the acknowledged part of each group ("" if none is), and its values."""
    # The acknowledgements that reach into the window (a few rows) become a condition on each row,
    # not a join: the planner cannot know how many rows the window holds, and a nested loop over
    # them looking up an acknowledgement each cost four times the scan (bench/results/REPORT-console.md).
    acknowledged, params = [], {}
    for number, (ack_destination, ack_cause, through) in enumerate(
        FailureAcknowledgement.objects.filter(through__gte=since).values_list(
            "destination_id", "cause", "through"
        )
    ):
        acknowledged.append(
            f"(d.destination_id = %(ack_d{number})s AND cause = %(ack_c{number})s "
            f"AND d.updated_at <= %(ack_t{number})s)"
        )
        params.update(
            {f"ack_d{number}": ack_destination, f"ack_c{number}": ack_cause, f"ack_t{number}": through}
        )
    return (f"WHERE NOT ({' OR '.join(acknowledged)})" if acknowledged else ""), params


def failure_group_deliveries(
    *, destination_id: int, cause: str, now: datetime, since: datetime | None = None
) -> QuerySet[Delivery]:
    """The dead deliveries of one group as failure_groups counts them (not acknowledged), newest first."""
    since = since or now - FAILURE_WINDOW
    deliveries = Delivery.objects.filter(
        status=DeliveryStatus.DEAD, updated_at__gte=since, destination_id=destination_id
    ).extra(where=[f"({failures.CAUSE_SQL}) = %s"], params=[cause])
    through = (
        FailureAcknowledgement.objects.filter(destination_id=destination_id, cause=cause)
        .values_list("through", flat=True)
        .first()
    )
    if through is not None:
        deliveries = deliveries.filter(updated_at__gt=through)
    return deliveries.order_by("-updated_at")


def attempts_not_counted() -> Coalesce:
    """An annotation of deliveries: how many of each one's attempts cost none of its budget (counted False: a
    429, a gone or down receiver). One probe of attempt_unique_number per delivery read."""
    not_counted = (
        DeliveryAttempt.objects.filter(delivery=OuterRef("pk"), counted=False)
        .order_by()
        .values("delivery")
        .annotate(n=Count("*"))
        .values("n")
    )
    return Coalesce(Subquery(not_counted), 0)
