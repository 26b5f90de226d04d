"""The console's admin log (django.contrib.admin's LogEntry) as a copy of a recipient's data.

Every console change writes an entry naming the object it changed: its id and
its str() (a recipient's is their name). Erasing a recipient erases the entries
about them and their rows; exporting one lists them. Here, in the lowest app
whose rows have entries (events), so that users and delivery can each reach the
entries of their own models and monitoring, which may not read users, may still
read delivery.
"""

from __future__ import annotations

from collections.abc import Collection

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models


def _entries(*, model: type[models.Model], object_ids: Collection) -> models.QuerySet[LogEntry]:
    return LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(model), object_id__in=[str(pk) for pk in object_ids]
    )


def admin_log_forget(*, model: type[models.Model], object_ids: Collection) -> int:
    """Delete the console's log entries about these rows of `model`; return how many went."""
    if not object_ids:
        return 0
    deleted, _ = _entries(model=model, object_ids=object_ids).delete()
    return deleted


def admin_log_export(*, model: type[models.Model], object_ids: Collection) -> list[dict]:
    """The console's log entries about these rows of `model`, oldest first, as JSON-ready dicts."""
    if not object_ids:
        return []
    return [
        {
            "action_time": entry.action_time,
            "operator": entry.user.get_username(),
            "action": {1: "added", 2: "changed", 3: "deleted"}.get(entry.action_flag, str(entry.action_flag)),
            "object": entry.object_repr,
            "object_id": entry.object_id,
            "message": entry.get_change_message(),
        }
        for entry in _entries(model=model, object_ids=object_ids)
        .select_related("user")
        .order_by("action_time", "id")
    ]
