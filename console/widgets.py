"""What the console's pages share: status badges, durations, local times, list filters, read-only inlines."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.contrib import admin, messages
from django.forms.models import BaseInlineFormSet
from django.utils import timezone
from django.utils.html import format_html

from delivery.rules.attempt_words import AttemptCount
from scheduling.exceptions import SchedulingError
from scheduling.times import load_timezone

# Status -> badge colour. Shared by events, deliveries, attempts and processes.
BADGE_COLOURS = {
    # events
    "PENDING": "#4a6f8a",
    "PROCESSING": "#b7791f",
    "COMPLETED": "#2f855a",
    "FAILED": "#c53030",
    # deliveries
    "QUEUED": "#4a6f8a",
    "SENDING": "#b7791f",
    "DELIVERED": "#2f855a",
    "DEAD": "#c53030",
    # attempts
    "TRANSIENT_FAILURE": "#b7791f",
    "PERMANENT_FAILURE": "#c53030",
    "ABANDONED": "#6b46c1",
    # processes
    "running": "#2f855a",
    "lost": "#c53030",
    "stopped": "#718096",
    # an overdue PENDING event
    "OVERDUE": "#dd6b20",
}


def badge(value: str, label: str | None = None):
    """A coloured pill for a status value (white text, so readable in both themes)."""
    return format_html(
        '<span class="bs-badge" style="background:{}">{}</span>',
        BADGE_COLOURS.get(value, "#718096"),
        label or value,
    )


def humanize_delay(delta: timedelta) -> str:
    """'3 d 4 h', '2 h 05 min', '12 min', '40 s'."""
    seconds = int(delta.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def when_text(moment: datetime | None) -> str:
    """A moment as the console writes it everywhere: '2027-03-14 13:00 UTC' ("—" for none).

    The page's script (templates/admin/base_site.html) rewrites each `when()` in
    the operator's own zone; this is what shows without it, and in messages.
    """
    if moment is None:
        return "—"
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def when(moment: datetime | None):
    """A moment in the console's one format, the full ISO instant on hover and in `datetime`."""
    if moment is None:
        return "—"
    iso = moment.astimezone(UTC).isoformat()
    return format_html(
        '<time class="bs-when" datetime="{}" title="{}">{}</time>', iso, iso, when_text(moment)
    )


def when_in_zone(moment: datetime | None, zone: str):
    """A moment in a zone of the data's own (a destination's digest zone), as its people read it, with UTC on
    hover: 'Mon 2026-11-30 09:30 Europe/Berlin'. Not a `when()`, which the page shows in the operator's zone."""
    if moment is None:
        return "—"
    local = moment.astimezone(load_timezone(zone))
    return format_html(
        '<time class="bs-zoned" datetime="{}" title="{}">{} {}</time>',
        local.isoformat(),
        when_text(moment),
        f"{local:%a %Y-%m-%d %H:%M}",
        zone,
    )


def attempts(count: AttemptCount):
    """Attempts as an operator reads them: '3 of 8', and a word for those not counted ('3 of 8, and 2 not
    counted'), which cost none of the budget. A resend's raised budget says so on hover.

    An operator's Resend allows DELIVERY_MAX_ATTEMPTS more, and attempt numbers keep counting, so
    a resent delivery reads '9 of 16' under a setting of 8.
    """
    if count.budget > settings.DELIVERY_MAX_ATTEMPTS:
        return format_html(
            '<span title="Raised by a resend: each allows {} more (DELIVERY_MAX_ATTEMPTS)">{}</span>',
            settings.DELIVERY_MAX_ATTEMPTS,
            count.words(),
        )
    return count.words()


def split_local_time(iso: str) -> tuple[str, str]:
    """'2027-03-14T09:00:00.5-04:00' -> ('2027-03-14 09:00', '-04:00'), whatever the precision."""
    try:
        local = datetime.fromisoformat(iso)
    except ValueError:
        return iso, ""
    offset = local.isoformat()[-6:] if local.utcoffset() is not None else ""
    return local.strftime("%Y-%m-%d %H:%M"), offset


def local_time(iso: str, zone: str):
    """A stored local time ('2027-03-14T09:00:00-04:00') and its zone: the wall time, its offset, the zone below."""
    wall, offset = split_local_time(iso)
    return format_html(
        '{} <span class="bs-muted">{}</span><br><span class="bs-muted">{}</span>', wall, offset, zone
    )


def parse_uuid(term: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


def run_operator_action(
    modeladmin, request, queryset, *, service, verb: str, kwarg: str, outcome: str = "queued"
) -> None:
    """Call `service` for each selected row, log what succeeded, report each refusal.

    Each row is its own unit: a refusal (wrong state, or changed by someone else
    meanwhile) does not stop the others. The services enforce the state machine
    and the one-delivery-per-occurrence rule; the admin only reports.
    """
    operator = request.user.get_username()
    done = 0
    for obj in queryset:
        try:
            service(**{kwarg: obj}, operator=operator)
        except SchedulingError as exc:
            modeladmin.message_user(request, f"{verb} refused for {obj}: {exc}", level=messages.ERROR)
            continue
        modeladmin.log_change(request, obj, f"{verb} by operator {operator}.")
        done += 1
    if done:
        modeladmin.message_user(
            request,
            f"{verb}: {done} {modeladmin.opts.verbose_name if done == 1 else modeladmin.opts.verbose_name_plural} "
            f"{outcome}.",
            level=messages.SUCCESS,
        )


def operator_action(service, *, description: str, verb: str, kwarg: str, outcome: str):
    """A list action (for those who may change the rows) that runs `service` on each selected row, as
    run_operator_action does."""

    @admin.action(description=description, permissions=["change"])
    def action(modeladmin, request, queryset) -> None:
        run_operator_action(
            modeladmin, request, queryset, service=service, verb=verb, kwarg=kwarg, outcome=outcome
        )

    return action


def pause_resume_actions(*, pause, resume, kwarg: str, described: tuple[str, str]):
    """An admin's Pause and Resume list actions, running the `pause` and `resume` services (taking the row
    as `kwarg`); `described`: their descriptions in the actions menu."""
    return (
        operator_action(pause, description=described[0], verb="Pause", kwarg=kwarg, outcome="paused"),
        operator_action(resume, description=described[1], verb="Resume", kwarg=kwarg, outcome="resumed"),
    )


if TYPE_CHECKING:
    # What the mixin is mixed into, for the type checker (at run time a mixin is a plain class).
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = object


class DeadlineFilter(admin.SimpleListFilter):
    """The rows at `status` whose `deadline` (a field) has passed, chosen as `passed`, or not yet, as `ahead`.

    A subclass names them, its title and parameter, and its lookups (the two choices, in its order).
    """

    status: str
    deadline: str
    passed: str
    ahead: str

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == self.passed:
            return queryset.filter(status=self.status, **{f"{self.deadline}__lt": now})
        if self.value() == self.ahead:
            return queryset.filter(status=self.status, **{f"{self.deadline}__gte": now})
        return queryset


class ViewOnlyPageMixin(_ModelAdmin):
    """A model page that is a view: every field of its fieldsets read-only.

    The changelist keeps the model's change permission, because the page's
    operator actions (Resend, Pause, Resume) require it.
    """

    def get_readonly_fields(self, request, obj=None):
        assert self.fieldsets is not None  # a view-only page names its fields in fieldsets
        return [field for fieldset in self.fieldsets for field in fieldset[1]["fields"]]

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)


class ReadOnlyInlineMixin:
    """Inlines that show history: no adding, editing or deleting rows in place."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class LatestRowsFormSet(BaseInlineFormSet):
    """An inline's first `shown` rows in its ordering, not all: a page costs the same however long the history behind it."""

    shown = 10

    def get_queryset(self):
        if not hasattr(self, "_latest"):
            self._latest = super().get_queryset()[: self.shown]
        return self._latest
