"""Reads of process heartbeats, for the operator console."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Case, CharField, QuerySet, Value, When

from runtime.models import ProcessHeartbeat


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
