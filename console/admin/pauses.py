"""Event types in the operator console: pause and resume one type's messages for every recipient."""

from __future__ import annotations

from django.contrib import admin

from console import widgets
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
            return widgets.badge("OVERDUE", "Paused: not sent")
        return widgets.badge("COMPLETED", "Sent")

    @admin.action(
        description="Pause the selected event types' messages for every recipient", permissions=["change"]
    )
    def pause(self, request, queryset):
        for row in queryset:
            event_type_pause(event_type=row.event_type, by=request.user.get_username())
            self.log_change(request, row, "Paused")
        self.message_user(
            request, f"Paused {len(queryset)} event type(s): their messages are held back from now on."
        )

    @admin.action(description="Resume the selected event types' messages", permissions=["change"])
    def resume(self, request, queryset):
        for row in queryset:
            event_type_resume(event_type=row.event_type, by=request.user.get_username())
            self.log_change(request, row, "Resumed")
        self.message_user(
            request,
            f"Resumed {len(queryset)} event type(s): the next occurrences whose send time has not passed go out.",
        )
