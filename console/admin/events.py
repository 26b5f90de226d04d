"""Events in the operator console: read-only rows, changed only through the services' actions."""

from __future__ import annotations

import re
from datetime import timedelta

from django.contrib import admin, messages
from django.contrib.admin.views.main import SEARCH_VAR
from django.db.models import F, Q, TextField
from django.db.models.functions import Cast
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from console import confirm, widgets
from console.pagination import BoundedListAdmin
from delivery.actions.resend import event_resend
from delivery.rules.attempt_words import AttemptCount
from delivery.selectors import attempts_not_counted
from scheduling.models import Event, EventStatus
from scheduling.services.sync import event_deliver_now, event_deliver_now_refusal
from users.selectors import SEARCH_RECIPIENTS_BOUND, user_ids_found

EVENT_KEY = re.compile(r"^event-[0-9a-f]{16}$")


def retries_of(event: Event) -> int:
    """Attempts after the first at the destination that needed the most (the deliveries record the attempts)."""
    return max((d.attempts - 1 for d in event.deliveries.all()), default=0) if event.pk else 0


class OverdueFilter(widgets.DeadlineFilter):
    """PENDING events whose send time has passed (the scheduler has not claimed them)."""

    title = "overdue"
    parameter_name = "overdue"
    status, deadline = EventStatus.PENDING, "target_timestamp_utc"
    passed, ahead = "yes", "no"

    def lookups(self, request, model_admin):
        return [("yes", "Overdue (pending, past due)"), ("no", "Pending, not yet due")]


class TargetWindowFilter(admin.SimpleListFilter):
    """Events whose send time falls in a window around now, whatever their status.

    Windows of a day or a week, not years: a window's rows are read through
    both partial indexes (PENDING, and the rest) and sorted, so its cost is
    the window's size, never the history's. It stands where a date hierarchy
    would: that one lists the years and months present by reading every row.
    """

    title = "target time"
    parameter_name = "target"
    WINDOWS = {
        "past_24h": ("Past 24 hours", timedelta(hours=-24), timedelta(0)),
        "past_7d": ("Past 7 days", timedelta(days=-7), timedelta(0)),
        "next_24h": ("Next 24 hours", timedelta(0), timedelta(hours=24)),
        "next_7d": ("Next 7 days", timedelta(0), timedelta(days=7)),
    }

    def lookups(self, request, model_admin):
        return [(key, label) for key, (label, _, _) in self.WINDOWS.items()]

    def queryset(self, request, queryset):
        value = self.value()
        if value is None or value not in self.WINDOWS:
            return queryset
        _, start, end = self.WINDOWS[value]
        now = timezone.now()
        window = Q(target_timestamp_utc__gte=now + start, target_timestamp_utc__lt=now + end)
        # Each arm carries its partial index's own predicate, so each is read from it.
        return queryset.filter(
            (Q(status=EventStatus.PENDING) & window) | (~Q(status=EventStatus.PENDING) & window)
        )


def status_chosen(request) -> bool:
    """Whether the list is narrowed to one status (by its filter, or the overdue one, which means PENDING)."""
    return request.GET.get("status__exact") in EventStatus.values or request.GET.get("overdue") in (
        "yes",
        "no",
    )


@admin.register(Event)
class EventAdmin(BoundedListAdmin):
    # Status and when first after who: the columns an operator reads at any width.
    list_display = [
        "user_link",
        "event_type",
        "status_badge",
        "target_utc",
        "lateness",
        "occurrence_date",
        "target_local",
        "retries",
    ]
    list_select_related = ["user"]

    def get_queryset(self, request):
        # The deliveries of a page's events in one more query, for `retries`.
        return super().get_queryset(request).prefetch_related("deliveries")

    list_filter = ["status", "event_type", OverdueFilter, TargetWindowFilter]
    # What the search box looks in; get_search_results does the matching.
    search_fields = ["user__first_name", "user__last_name", "user__external_id"]
    search_help_text = (
        "A recipient's name (a word of fewer than three letters matches the start of a name) or external id, "
        "an event id, a recipient id or an idempotency key (event-…)."
    )
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
            {"fields": ["delivery_link", "executed_at", "failure_reason", "retries"]},
        ),
        (
            "Internals",
            {
                "classes": ["collapse"],
                "fields": ["idempotency_key", "version", "created_at", "updated_at"],
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
        # events go when the recipient is deleted (users.services.user_erase).
        return False

    def get_ordering(self, request):
        # In one status, latest send time first: a backward scan of that
        # status's partial index (event_pending_due_idx, event_history_idx).
        # Across statuses no index holds the send time, and one would be
        # written on the claim's hot path, at each next event's insert and at
        # each status change (bench/results/REPORT-history.md); the key is
        # time-ordered (uuid7), so its index gives the events scheduled last
        # first, for nothing.
        # A search lists a few recipients' events (get_search_results), in the
        # same order, but sorted after they are read: given the order's index
        # under the page's LIMIT, PostgreSQL may walk it through all of the
        # history looking for them. An expression no index holds (the same
        # value, cast) leaves it the recipients' and the keys' indexes only.
        if request.GET.get(SEARCH_VAR, "").strip():
            if status_chosen(request):
                return [(F("target_timestamp_utc") + timedelta(0)).desc()]
            # The key's text sorts as the key does (fixed-width lowercase hex).
            return [Cast("id", TextField()).desc()]
        return ["-target_timestamp_utc"] if status_chosen(request) else ["-id"]

    def get_sortable_by(self, request):
        # Only the send time, and only within one status, where an index
        # serves either direction; any other sort would sort the whole history.
        return ["target_utc"] if status_chosen(request) else []

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if EVENT_KEY.match(term):
            return queryset.filter(idempotency_key=term), False
        as_uuid = widgets.parse_uuid(term)
        if as_uuid is not None:
            return queryset.filter(Q(id=as_uuid) | Q(user_id=as_uuid)), False
        if not term:
            return queryset, False
        # The recipients the search finds first, through their names' indexes, then
        # their events by recipient (users.selectors.user_ids_found says why).
        user_ids, more = user_ids_found(term=search_term, bound=SEARCH_RECIPIENTS_BOUND)
        if more:
            self.message_user(
                request,
                f"More than {SEARCH_RECIPIENTS_BOUND:,} recipients match “{term}”: these are the events of "
                f"{SEARCH_RECIPIENTS_BOUND:,} of them. Type more of the name to find the others.",
                level=messages.WARNING,
            )
        return queryset.filter(user_id__in=user_ids), False

    # --- columns ------------------------------------------------------------------

    @admin.display(description="recipient", ordering="user__last_name")
    def user_link(self, event: Event):
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:users_user_change", args=[event.user_id]),
            event.user,
        )

    @admin.display(description="send time", ordering="target_timestamp_utc")
    def target_utc(self, event: Event):
        return widgets.when(event.target_timestamp_utc)

    @admin.display(description="recipient's local time")
    def target_local(self, event: Event):
        # The stored ISO text keeps the offset in force at that instant.
        return widgets.local_time(event.target_timestamp_local, event.target_timezone)

    @admin.display(description="status", ordering="status")
    def status_badge(self, event: Event):
        return widgets.badge(event.status, event.get_status_display())

    @admin.display(description="late by")
    def lateness(self, event: Event):
        now = timezone.now()
        if event.status == EventStatus.PENDING and event.target_timestamp_utc < now:
            return format_html(
                '<span class="bs-late">{}</span>',
                widgets.humanize_delay(now - event.target_timestamp_utc),
            )
        return "—"

    @admin.display(description="retries")
    def retries(self, event: Event) -> int:
        return retries_of(event)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        # Nothing on an event's page can be edited (every field is read-only; it changes through the
        # actions), so no Save button stands on it, whatever its status.
        extra_context = {
            **(extra_context or {}),
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
        }
        return super().change_view(request, object_id, form_url, extra_context)

    @admin.display(description="deliveries")
    def delivery_link(self, event: Event):
        deliveries = (
            list(event.deliveries.select_related("destination").annotate(not_counted=attempts_not_counted()))
            if event.pk
            else []
        )
        if not deliveries:
            return "— (none queued)"
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a> {} {} <span class="bs-muted">{} attempts used</span>',
            (
                (
                    reverse("admin:delivery_delivery_change", args=[delivery.pk]),
                    delivery.destination.name if delivery.destination else "a deleted destination",
                    delivery.idempotency_key,
                    widgets.badge(delivery.status, delivery.get_status_display()),
                    widgets.attempts(
                        AttemptCount(
                            made=delivery.attempts,
                            not_counted=delivery.not_counted,
                            max_attempts=delivery.max_attempts,
                        )
                    ),
                )
                for delivery in deliveries
            ),
        )

    # --- actions ------------------------------------------------------------------

    @admin.action(description="Resend selected FAILED events…", permissions=["change"])
    def resend(self, request, queryset):
        return confirm.confirmed_first(
            self,
            request,
            queryset.select_related("user"),
            title="Resend these failed events?",
            consequence=(
                "Each failed event's dead deliveries are queued again, under the same idempotency key, with "
                "a fresh budget of attempts: its recipient's greeting goes out late to the destinations "
                "that did not get it. Destinations that got it are not sent it again."
            ),
            button="Yes, resend them",
            item=lambda event: confirm.Item(
                label=_event_label(event),
                refusal="" if event.status == EventStatus.FAILED else f"it is {event.get_status_display()}",
            ),
            run=lambda rows: widgets.run_operator_action(
                self, request, rows, service=event_resend, verb="Resend", kwarg="event"
            ),
        )

    @admin.action(
        description="Deliver today's greeting now (selected PENDING events due today)…",
        permissions=["change"],
    )
    def deliver_now(self, request, queryset):
        now = timezone.now()
        return confirm.confirmed_first(
            self,
            request,
            queryset.select_related("user"),
            title="Send today's greetings now?",
            consequence=(
                "Each event below is its recipient's occurrence of today: it is sent now instead of at its "
                "send time, and not again at the send time (an occurrence is sent once). Only today's "
                "occurrence can be sent early: a later one sent now would leave its real day without a "
                "greeting."
            ),
            button="Yes, send them now",
            item=lambda event: confirm.Item(
                label=_event_label(event), refusal=event_deliver_now_refusal(event=event, now=now)
            ),
            run=lambda rows: widgets.run_operator_action(
                self,
                request,
                rows,
                service=event_deliver_now,
                verb="Deliver now",
                kwarg="event",
                # The scheduler, woken at once, claims and queues it.
                outcome="due now; the scheduler sends it next",
            ),
        )


def _event_label(event: Event) -> str:
    return (
        f"{event.get_event_type_display()} of {event.user} on {event.occurrence_date:%Y-%m-%d} "
        f"({event.get_status_display().lower()}, due {widgets.when_text(event.target_timestamp_utc)})"
    )
