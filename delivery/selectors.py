"""Reads of deliveries and attempts, for the console and the worker."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Min, Q, QuerySet

from delivery import secret_store
from delivery.models import (
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Destination,
    DestinationSecret,
    Endpoint,
    EndpointState,
    Recovery,
)
from runtime.aggregates import counts_by, estimated_counts_by
from scheduling.admin_log import admin_log_export


def deliveries_export(*, event_ids: Collection) -> list[dict]:
    """Every delivery of these events with its attempts and the console's log of it, as JSON-ready dicts."""
    deliveries = list(
        Delivery.objects.filter(event_id__in=list(event_ids)).order_by("created_at", "id").values()
    )
    attempts: dict = {}
    for attempt in (
        DeliveryAttempt.objects.filter(delivery_id__in=[d["id"] for d in deliveries])
        .order_by("delivery_id", "number")
        .values()
    ):
        attempts.setdefault(attempt["delivery_id"], []).append(attempt)
    return [
        {
            **delivery,
            "attempts": attempts.get(delivery["id"], []),
            "console_log": admin_log_export(model=Delivery, object_ids=[delivery["id"]]),
        }
        for delivery in deliveries
    ]


def next_retry_at() -> datetime | None:
    """When the earliest QUEUED delivery is due (an idle worker sleeps until then)."""
    return Delivery.objects.filter(status=DeliveryStatus.QUEUED).aggregate(first=Min("next_attempt_at"))[
        "first"
    ]


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
    )
    attempts = DeliveryAttempt.objects.filter(finished_at__gt=day_ago).aggregate(
        attempts_hour=Count("id", filter=Q(finished_at__gt=hour_ago)),
        attempts_day=Count("id"),
        failed_attempts_hour=Count(
            "id",
            filter=Q(finished_at__gt=hour_ago) & ~Q(outcome=AttemptOutcome.DELIVERED),
        ),
        failed_attempts_day=Count("id", filter=~Q(outcome=AttemptOutcome.DELIVERED)),
    )
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
    logged as abandoned by the worker that took over from a lost one.
    """
    return counts_by(
        DeliveryAttempt.objects.filter(finished_at__gt=since), field="outcome", keys=AttemptOutcome.values
    )


# --- endpoints ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Backlog:
    """Deliveries waiting on one endpoint: QUEUED, and SENDING under a worker's lease."""

    queued: int = 0
    sending: int = 0


def endpoint_backlog(*, keys: Collection[str]) -> dict[str, Backlog]:
    """What waits on each of these endpoints, by key (every key present, zero if nothing).

    One GROUP BY over the unfinished deliveries only: each status arm can be
    read from its partial index (claim or lease), so delivered and dead history
    is never counted, however long it grows.
    """
    backlog = dict.fromkeys(keys, Backlog())
    if not backlog:
        return backlog
    rows = (
        Delivery.objects.filter(
            Q(status=DeliveryStatus.QUEUED) | Q(status=DeliveryStatus.SENDING), endpoint_key__in=list(backlog)
        )
        .values("endpoint_key")
        .annotate(
            queued=Count("id", filter=Q(status=DeliveryStatus.QUEUED)),
            sending=Count("id", filter=Q(status=DeliveryStatus.SENDING)),
        )
        .order_by()
        .values_list("endpoint_key", "queued", "sending")
    )
    for key, queued, sending in rows:
        backlog[key] = Backlog(queued=queued, sending=sending)
    return backlog


def endpoint_list(*, unhealthy_only: bool = False) -> list[Endpoint]:
    """Every endpoint (one row per receiver, so a handful), by what it shows of its URL; or only the failing and
    paused ones."""
    endpoints = Endpoint.objects.order_by("url_display", "key")
    if unhealthy_only:
        endpoints = endpoints.exclude(state=EndpointState.HEALTHY)
    return list(endpoints)


def destinations_for_claim() -> list[Destination]:
    """The enabled destinations, read once per claim batch, locked FOR KEY SHARE until the batch commits.

    The lock lets other claims read them too but makes an edit's or a
    deletion's FOR UPDATE wait for the batch: the deliveries it queues are
    then seen by the edit (moved to a new URL) or the deletion (refused).
    """
    table = Destination._meta.db_table
    return list(Destination.objects.raw(f"SELECT * FROM {table} WHERE enabled ORDER BY id FOR KEY SHARE"))


def destination_signing_secrets(
    *, destinations: Iterable[Destination], now: datetime
) -> dict[int, list[str]]:
    """Each destination's secrets in force at `now`, decrypted, newest first (the worker's signers)."""
    by_destination: dict[int, list[str]] = {d.pk: [] for d in destinations}
    rows = DestinationSecret.objects.filter(destination__in=list(by_destination)).order_by(
        "-created_at", "-id"
    )
    for stored in rows:
        if stored.expires_at is None or stored.expires_at > now:
            by_destination[stored.destination_id].append(secret_store.secret_decrypt(stored.ciphertext))
    return by_destination


def destination_list() -> QuerySet[Destination]:
    """The destinations by name, each with its secrets' hints (one more query per page)."""
    return Destination.objects.order_by("name").prefetch_related("secrets")


def destination_endpoints(*, destinations: Iterable[Destination]) -> dict[str, Endpoint]:
    """The endpoint row of each destination's URL that has one (its health and pause), by key (url_key)."""
    return {e.key: e for e in Endpoint.objects.filter(key__in=[d.url_key for d in destinations])}


def endpoint_destination_names(*, endpoints: Iterable[Endpoint]) -> dict[str, str]:
    """The name of the destination of each endpoint that has one, by key: how endpoints are named to people."""
    return dict(
        Destination.objects.filter(url_key__in=[e.key for e in endpoints]).values_list("url_key", "name")
    )


def recipients_attempt_count(*, user_ids: Collection) -> int:
    """How many delivery attempts the recipients' deliveries have: what their erasure keeps, stripped (delivery.services.erasure)."""
    return DeliveryAttempt.objects.filter(delivery__event__user_id__in=user_ids).count()


def destination_unsent_count(*, destination_id: int) -> int:
    """How many deliveries the destination still has to send (QUEUED or SENDING)."""
    return Delivery.objects.filter(
        destination_id=destination_id, status__in=[DeliveryStatus.QUEUED, DeliveryStatus.SENDING]
    ).count()


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
