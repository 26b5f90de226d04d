"""Writes of process heartbeats: one row per process, refreshed while it lives."""

from __future__ import annotations

from django.utils import timezone

from runtime.models import ProcessHeartbeat


def heartbeat_start(*, kind: str, name: str, host: str, pid: int, zone_data: str) -> ProcessHeartbeat:
    now = timezone.now()
    beat, _ = ProcessHeartbeat.objects.update_or_create(
        name=name,
        defaults={
            "kind": kind,
            "host": host,
            "pid": pid,
            "started_at": now,
            "last_seen_at": now,
            "stopped_at": None,
            "zone_data": zone_data,
        },
    )
    return beat


def heartbeat_beat(
    *,
    kind: str,
    name: str,
    host: str,
    pid: int,
    zone_data: str,
    processed: int,
    succeeded: int,
    failed: int,
    stopped: bool = False,
) -> None:
    now = timezone.now()
    counts = {"processed": processed, "succeeded": succeeded, "failed": failed, "zone_data": zone_data}
    updated = ProcessHeartbeat.objects.filter(name=name).update(
        last_seen_at=now, stopped_at=now if stopped else None, **counts
    )
    if not updated:
        # The row is gone (a migration recreated the table, an operator deleted
        # it): a live process writes itself back rather than vanish from the console.
        ProcessHeartbeat.objects.create(
            kind=kind,
            name=name,
            host=host,
            pid=pid,
            started_at=now,
            last_seen_at=now,
            stopped_at=now if stopped else None,
            **counts,
        )
