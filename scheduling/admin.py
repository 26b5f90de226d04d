"""Events in the operator console: read-only rows, changed only through the services' actions."""

from __future__ import annotations

import re
import uuid

from django.contrib import admin, messages
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

import config.admin as console
from scheduling import services
from scheduling.exceptions import SchedulingError
from scheduling.models import Event, EventStatus

# The dashboard URL and the console's titles; admin autodiscovery imports this
# module before config/urls.py reads admin.site.urls.
console.install(admin.site)

EVENT_KEY = re.compile(r"^event-[0-9a-f]{16}$")


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
            modeladmin.message_user(
                request, f"{verb} refused for {obj}: {exc}", level=messages.ERROR
            )
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


class OverdueFilter(admin.SimpleListFilter):
    """PENDING events whose send time has passed (the scheduler has not claimed them)."""

    title = "overdue"
    parameter_name = "overdue"

    def lookups(self, request, model_admin):
        return [("yes", "Overdue (pending, past due)"), ("no", "Pending, not yet due")]

    def queryset(self, request, queryset):
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(status=EventStatus.PENDING, target_timestamp_utc__lt=now)
        if self.value() == "no":
            return queryset.filter(status=EventStatus.PENDING, target_timestamp_utc__gte=now)
        return queryset


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = [
        "user_link",
        "event_type",
        "occurrence_date",
        "target_utc",
        "target_local",
        "status_badge",
        "retry_count",
        "lateness",
    ]
    list_select_related = ["user"]
    # Latest send time first. Filtered by status (how operators mostly look), this
    # is a backward scan of event_status_target_idx instead of a sort of every
    # row in that status; the model's default (-occurrence_date, -created_at) has
    # no index.
    ordering = ["-target_timestamp_utc"]
    list_filter = ["status", "event_type", OverdueFilter]
    date_hierarchy = "target_timestamp_utc"
    # Names only; ids and keys are matched exactly in get_search_results.
    search_fields = ["user__first_name", "user__last_name"]
    search_help_text = "A recipient's name, an event id, a recipient id or an idempotency key (event-…)."
    # Counting every event for "N total" costs a scan of the table.
    show_full_result_count = False
    list_per_page = 50
    actions = ["resend", "deliver_now"]
    fieldsets = [
        (None, {"fields": ["id", "user_link", "event_type", "status_badge", "occurrence_date"]}),
        (
            "When",
            {"fields": ["target_timestamp_utc", "target_timestamp_local", "target_timezone", "lateness"]},
        ),
        (
            "Outcome",
            {"fields": ["delivery_link", "executed_at", "failure_reason", "retry_count"]},
        ),
        (
            "Internals",
            {
                "classes": ["collapse"],
                "fields": ["idempotency_key", "version", "delivery_payload", "created_at", "updated_at"],
            },
        ),
    ]

    # Every field is read-only: an event changes only through the state machine
    # (services), which the actions call. The form is a view with action links.
    def get_readonly_fields(self, request, obj=None):
        return [field for fieldset in self.fieldsets for field in fieldset[1]["fields"]]

    def has_add_permission(self, request):
        # Events follow from recipients: creating or editing a recipient schedules them.
        return False

    def has_change_permission(self, request, obj=None):
        # Finished events are history. Others show no editable field either, but
        # staying "changeable" keeps the actions available on them.
        if obj is not None and obj.status in (EventStatus.COMPLETED, EventStatus.FAILED):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        # Never: an event and its delivery attempts are the record of what was sent.
        # Deleting a finished event would also free its occurrence, so the
        # scheduler could create and send the same birthday again. A recipient's
        # events go when the recipient is deleted (users.services.user_delete).
        return False

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if EVENT_KEY.match(term):
            return queryset.filter(idempotency_key=term), False
        as_uuid = parse_uuid(term)
        if as_uuid is not None:
            return queryset.filter(Q(id=as_uuid) | Q(user_id=as_uuid)), False
        return super().get_search_results(request, queryset, search_term)

    # --- columns ------------------------------------------------------------------

    @admin.display(description="recipient", ordering="user__last_name")
    def user_link(self, event: Event):
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:users_user_change", args=[event.user_id]),
            event.user,
        )

    @admin.display(description="target (UTC)", ordering="target_timestamp_utc")
    def target_utc(self, event: Event) -> str:
        return event.target_timestamp_utc.strftime("%Y-%m-%d %H:%M")

    @admin.display(description="target (local)")
    def target_local(self, event: Event):
        # The stored ISO text keeps the offset in force at that instant.
        wall, offset = console.split_local_time(event.target_timestamp_local)
        return format_html(
            '{} <span class="bs-muted">{}</span><br><span class="bs-muted">{}</span>',
            wall,
            offset,
            event.target_timezone,
        )

    @admin.display(description="status", ordering="status")
    def status_badge(self, event: Event):
        return console.badge(event.status, event.get_status_display())

    @admin.display(description="late by")
    def lateness(self, event: Event):
        now = timezone.now()
        if event.status == EventStatus.PENDING and event.target_timestamp_utc < now:
            return format_html(
                '<span class="bs-late">{}</span>',
                console.humanize_delay(now - event.target_timestamp_utc),
            )
        return "—"

    @admin.display(description="delivery")
    def delivery_link(self, event: Event):
        delivery = getattr(event, "delivery", None) if event.pk else None
        if delivery is None:
            return "— (none queued)"
        return format_html(
            '<a href="{}">{}</a> {} <span class="bs-muted">{} of {} attempts used</span>',
            reverse("admin:delivery_delivery_change", args=[delivery.pk]),
            delivery.idempotency_key,
            console.badge(delivery.status, delivery.get_status_display()),
            delivery.attempts,
            delivery.max_attempts,
        )

    # --- actions ------------------------------------------------------------------

    @admin.action(description="Resend selected FAILED events", permissions=["change"])
    def resend(self, request, queryset):
        run_operator_action(
            self, request, queryset, service=services.event_resend, verb="Resend", kwarg="event"
        )

    @admin.action(description="Deliver selected PENDING events now", permissions=["change"])
    def deliver_now(self, request, queryset):
        run_operator_action(
            self,
            request,
            queryset,
            service=services.event_deliver_now,
            verb="Deliver now",
            kwarg="event",
            # The scheduler, woken at once, claims and queues it.
            outcome="due now; the scheduler sends it next",
        )
