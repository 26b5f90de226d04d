"""Event types in the operator console: pause and resume one type's messages for every recipient."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from console import confirm, widgets
from scheduling import selectors as event_selectors
from scheduling.models import EventTypePause
from scheduling.services.pauses import event_type_pause, event_type_resume


@admin.register(EventTypePause)
class EventTypePauseAdmin(widgets.ViewOnlyPageMixin, admin.ModelAdmin):
    """One row per event type (created by migrate); the actions go through scheduling.services.pauses."""

    list_display = ["event_type", "state", "paused_at", "paused_by", "resumed_at", "resumed_by"]
    fieldsets = [
        (None, {"fields": ["event_type", "state", "paused_at", "paused_by", "resumed_at", "resumed_by"]})
    ]
    actions = ["pause", "resume"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        # The next migrate would bring the row back, not paused.
        return False

    @admin.display(description="messages")
    def state(self, pause: EventTypePause):
        if pause.paused:
            return widgets.badge("OVERDUE", "Paused: held back")
        # Not "Sent": this row says whether messages of the type go out, not that any went.
        return widgets.badge("COMPLETED", "Going out")

    @admin.action(
        description="Pause the selected event types' messages for every recipient…", permissions=["change"]
    )
    def pause(self, request, queryset):
        rows = list(queryset)
        if not confirm.is_confirmed(request):
            this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
            due_soon = event_selectors.pending_per_type(start=this_hour, hours=24)
            return confirm.confirmation_page(
                self,
                request,
                title="Pause these messages for every recipient?",
                consequence=(
                    "From now until someone resumes it, every recipient's occurrence of each type below whose "
                    "send time comes is failed unsent (reason: event type paused) and is never sent, not even "
                    "after the resume: the next one is a year later."
                ),
                button="Yes, pause them for everyone",
                items=[
                    confirm.Item(
                        label=(
                            f"{row.get_event_type_display()}: {due_soon.get(row.event_type, 0):,} "
                            "occurrences are due in the next 24 hours"
                        ),
                        refusal="already paused" if row.paused else "",
                    )
                    for row in rows
                ],
            )
        for row in rows:
            event_type_pause(event_type=row.event_type, by=request.user.get_username())
            self.log_change(request, row, "Paused")
        self.message_user(
            request, f"Paused {len(rows)} event type(s): their messages are held back from now on."
        )
        return None

    @admin.action(description="Resume the selected event types' messages", permissions=["change"])
    def resume(self, request, queryset):
        for row in queryset:
            event_type_resume(event_type=row.event_type, by=request.user.get_username())
            self.log_change(request, row, "Resumed")
        self.message_user(
            request,
            f"Resumed {len(queryset)} event type(s): the next occurrences whose send time has not passed go out.",
        )
