"""Reads of events, for the API, the admin and the scheduler."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Max, Min, QuerySet

from scheduling.models import Event, EventStatus


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
