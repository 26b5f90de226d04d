"""The company's visibility per event type in the operator console; writes go through scheduling.services.celebration."""

from __future__ import annotations

from django.contrib import admin

from scheduling.models import CelebrationDefault
from scheduling.services.celebration import celebration_default_set


@admin.register(CelebrationDefault)
class CelebrationDefaultAdmin(admin.ModelAdmin):
    """One row per event type an operator chose a default for; a type without one is public."""

    list_display = ["event_type", "visibility", "updated_by", "updated_at"]
    fields = ["event_type", "visibility", "updated_by", "updated_at"]
    readonly_fields = ["updated_by", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        # The type of a row is what it is about: chosen once, when the row is added.
        return [*self.readonly_fields, "event_type"] if obj else self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        # Back to public is a choice like the others, made and recorded by saving it.
        return False

    def save_model(self, request, obj, form, change):
        saved = celebration_default_set(
            event_type=obj.event_type, visibility=obj.visibility, by=request.user.get_username()
        )
        obj.pk, obj.updated_by, obj.updated_at = saved.pk, saved.updated_by, saved.updated_at
