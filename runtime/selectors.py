"""Reads of process heartbeats, for the operator console, the metrics and check_process."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Case, CharField, Q, QuerySet, Value, When

from runtime.aggregates import counts_by
from runtime.models import ProcessHeartbeat, ProcessKind

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class ProcessState(TypedDict):
    state: str  # "running", "stopped" or "lost"


def processes_recent(
    *, now: datetime, within: timedelta = timedelta(days=1)
) -> QuerySet[WithAnnotations[ProcessHeartbeat, ProcessState]]:
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


def _fresh(*, now: datetime, max_age: timedelta) -> Q:
    """Still running (never stopped cleanly) and heard from within `max_age`."""
    return Q(stopped_at__isnull=True, last_seen_at__gte=now - max_age)


def process_live_counts(*, now: datetime) -> dict[str, int]:
    """Running processes of each kind (every kind present, zero if none).

    Running as the console means it: not stopped and seen within
    ProcessHeartbeat.LOST_AFTER_SECONDS. A range of process_last_seen_idx.
    """
    fresh = _fresh(now=now, max_age=timedelta(seconds=ProcessHeartbeat.LOST_AFTER_SECONDS))
    return counts_by(ProcessHeartbeat.objects.filter(fresh), field="kind", keys=ProcessKind.values)


@dataclass(frozen=True)
class Liveness:
    fresh: int  # matching processes running and heard from within max_age
    newest: ProcessHeartbeat | None  # the matching process heard from last, fresh or not


def process_liveness(
    *,
    kind: str,
    now: datetime,
    max_age: timedelta,
    host: str | None = None,
    pid: int | None = None,
    name: str | None = None,
) -> Liveness:
    """Whether processes of `kind` (on `host`, with `pid`, named `name`) write fresh heartbeats."""
    matching = ProcessHeartbeat.objects.filter(kind=kind)
    if host is not None:
        matching = matching.filter(host=host)
    if pid is not None:
        matching = matching.filter(pid=pid)
    if name is not None:
        matching = matching.filter(name=name)
    return Liveness(
        fresh=matching.filter(_fresh(now=now, max_age=max_age)).count(),
        newest=matching.order_by("-last_seen_at").first(),
    )
