"""Message templates in the operator console: one row per event type, its text editable."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db import models
from django.utils.html import format_html

from scheduling.handlers import get_handler
from scheduling.messages import placeholder_list
from scheduling.models import MessageTemplate
from scheduling.selectors import message_preview
from scheduling.services.messages import message_template_save


@admin.register(MessageTemplate)
class MessageTemplateAdmin(admin.ModelAdmin):
    list_display = ["event_type", "body", "updated_at", "updated_by"]
    fields = [
        "event_type",
        "body",
        "allowed_placeholders",
        "default_body",
        "preview",
        "updated_at",
        "updated_by",
    ]
    readonly_fields = [
        "event_type",
        "allowed_placeholders",
        "default_body",
        "preview",
        "updated_at",
        "updated_by",
    ]
    # A message may run over several lines; the body is the form's one text field.
    # (Its errors come from the model's clean(), which the form runs.)
    formfield_overrides = {models.CharField: {"widget": forms.Textarea(attrs={"rows": 3, "cols": 80})}}

    def has_add_permission(self, request):
        # Each registered event type has its row from migrate; there is no other to add.
        return False

    def has_delete_permission(self, request, obj=None):
        # The next migrate would bring the row back with the default: an operator
        # restores the default by saving its text (shown on the form) instead.
        return False

    def save_model(self, request, obj, form, change):
        message_template_save(template=obj, operator=request.user.get_username())

    @admin.display(description="allowed placeholders")
    def allowed_placeholders(self, template: MessageTemplate) -> str:
        return placeholder_list(get_handler(template.event_type).placeholders)

    @admin.display(description="default")
    def default_body(self, template: MessageTemplate) -> str:
        return get_handler(template.event_type).message_template

    @admin.display(description="next message")
    def preview(self, template: MessageTemplate):
        preview = message_preview(event_type=template.event_type)
        if preview is None:
            return "— (no recipient has a pending event of this type)"
        return format_html(
            '{}<br><span class="bs-muted">for {} on {}, with the text saved now</span>',
            preview.text,
            preview.recipient,
            preview.occurrence_date.isoformat(),
        )
