"""Reads of events, for the API, the admin and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db.models import Case, CharField, Count, Max, Min, Q, QuerySet, Value, When
from django.db.models.functions import TruncHour

from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus
from scheduling.models import Event, EventStatus, ProcessHeartbeat


def event_list_for_user(*, user_id) -> QuerySet[Event]:
    """A user's events, newest occurrence first."""
    return Event.objects.filter(user_id=user_id).order_by("-occurrence_date", "-created_at")


def events_pending_due(*, now: datetime) -> QuerySet[Event]:
    """PENDING events whose time has come, in target order (served by event_pending_due_idx)."""
    return Event.objects.filter(
        status=EventStatus.PENDING, target_timestamp_utc__lte=now
    ).order_by("target_timestamp_utc")


def next_pending_target(*, after: datetime | None = None) -> datetime | None:
    """The earliest PENDING target time (the scheduler sleeps until it)."""
    qs = Event.objects.filter(status=EventStatus.PENDING)
    if after is not None:
        qs = qs.filter(target_timestamp_utc__gt=after)
    first = qs.order_by("target_timestamp_utc").values_list("target_timestamp_utc", flat=True)[:1]
    return next(iter(first), None)


@dataclass(frozen=True)
class OverdueSummary:
    count: int
    oldest: datetime | None
    newest: datetime | None


def overdue_summary(*, now: datetime) -> OverdueSummary:
    """How many PENDING events are due and the range of their target times."""
    row = Event.objects.filter(
        status=EventStatus.PENDING, target_timestamp_utc__lte=now
    ).aggregate(count=Count("id"), oldest=Min("target_timestamp_utc"), newest=Max("target_timestamp_utc"))
    return OverdueSummary(count=row["count"], oldest=row["oldest"], newest=row["newest"])


# --- the operator console's dashboard ----------------------------------------------
# Aggregates only: each function is one or two queries whose cost depends on the
# index ranges they read (the pending partial index, (status, updated_at),
# attempt finished_at), never on a Python loop over rows.

def event_status_counts() -> dict[str, int]:
    """How many events are in each status (every status present, zero if none)."""
    row = Event.objects.aggregate(
        **{
            status.lower(): Count("id", filter=Q(status=status))
            for status in EventStatus.values
        }
    )
    return {status: row[status.lower()] for status in EventStatus.values}


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
        delivered_hour=Count(
            "id", filter=Q(status=DeliveryStatus.DELIVERED, updated_at__gt=hour_ago)
        ),
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
    return Delivery.objects.filter(
        status__in=[DeliveryStatus.QUEUED, DeliveryStatus.SENDING]
    ).aggregate(
        queued=Count("id", filter=Q(status=DeliveryStatus.QUEUED)),
        sending=Count("id", filter=Q(status=DeliveryStatus.SENDING)),
    )


def processes_recent(*, now: datetime, within: timedelta = timedelta(days=1)) -> QuerySet:
    """Scheduler and worker heartbeats seen `within`, annotated with state.

    state is "stopped" (shut down cleanly), "lost" (silent for more than
    ProcessHeartbeat.LOST_AFTER_SECONDS without stopping: killed, or its host
    died) or "running". Older rows are left out: every restart leaves one behind.
    """
    lost_before = now - timedelta(seconds=ProcessHeartbeat.LOST_AFTER_SECONDS)
    return (
        ProcessHeartbeat.objects.filter(last_seen_at__gte=now - within)
        .annotate(
            state=Case(
                When(stopped_at__isnull=False, then=Value("stopped")),
                When(last_seen_at__lt=lost_before, then=Value("lost")),
                default=Value("running"),
                output_field=CharField(),
            )
        )
        .order_by("kind", "-last_seen_at")
    )


def pending_per_hour(*, start: datetime, hours: int = 24) -> list[tuple[datetime, int]]:
    """PENDING events per UTC hour from `start` (an hour boundary), every hour listed.

    One GROUP BY over a range of the event_pending_due_idx partial index.
    """
    end = start + timedelta(hours=hours)
    counts = dict(
        Event.objects.filter(
            status=EventStatus.PENDING,
            target_timestamp_utc__gte=start,
            target_timestamp_utc__lt=end,
        )
        .annotate(hour=TruncHour("target_timestamp_utc", tzinfo=UTC))
        .values("hour")
        .annotate(count=Count("id"))
        .values_list("hour", "count")
    )
    return [
        (start + timedelta(hours=i), counts.get(start + timedelta(hours=i), 0))
        for i in range(hours)
    ]
