"""Message templates in the operator console: one row per event type, its text editable, and the texts an
operator adds for a language or a milestone (added, edited, deleted)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db import models
from django.utils.html import format_html

from scheduling.handlers import get_handler
from scheduling.messages import placeholder_list
from scheduling.models import MessageTemplate
from scheduling.selectors import message_preview
from scheduling.services.messages import message_template_delete, message_template_save


@admin.register(MessageTemplate)
class MessageTemplateAdmin(admin.ModelAdmin):
    list_display = ["event_type", "language_shown", "milestone_shown", "body", "updated_at", "updated_by"]
    list_filter = ["event_type", "language"]
    fields = [
        "event_type",
        "language",
        "milestone",
        "body",
        "subject",
        "allowed_placeholders",
        "default_body",
        "preview",
        "updated_at",
        "updated_by",
    ]
    readonly_fields = [
        "allowed_placeholders",
        "default_body",
        "preview",
        "updated_at",
        "updated_by",
    ]
    # A message may run over several lines; the body is the form's one text field.
    # (Its errors come from the model's clean(), which the form runs.)
    formfield_overrides = {models.CharField: {"widget": forms.Textarea(attrs={"rows": 3, "cols": 80})}}

    def get_readonly_fields(self, request, obj=None):
        # What a row is for is fixed once saved: a new language or milestone is a new row.
        fixed = ["event_type", "language", "milestone"] if obj is not None else []
        return [*fixed, *self.readonly_fields]

    def get_fields(self, request, obj=None):
        # The preview and the defaults read the type, which a new row has yet to be given.
        return self.fields if obj is not None else ["event_type", "language", "milestone", "body", "subject"]

    def has_delete_permission(self, request, obj=None):
        # The default row stays: the next migrate would bring it back with the handler's
        # default; an operator restores that by saving its text (shown on the form) instead.
        return super().has_delete_permission(request, obj) and (obj is None or not obj.is_default)

    def save_model(self, request, obj, form, change):
        message_template_save(template=obj, operator=request.user.get_username())

    def delete_model(self, request, obj):
        message_template_delete(template=obj, operator=request.user.get_username())

    def delete_queryset(self, request, queryset):
        for template in queryset.exclude(language="", milestone__isnull=True):
            message_template_delete(template=template, operator=request.user.get_username())

    @admin.display(description="language", ordering="language")
    def language_shown(self, template: MessageTemplate) -> str:
        return template.language or "default"

    @admin.display(description="milestone", ordering="milestone")
    def milestone_shown(self, template: MessageTemplate) -> str:
        return f"year {template.milestone}" if template.milestone else "any"

    @admin.display(description="allowed placeholders")
    def allowed_placeholders(self, template: MessageTemplate) -> str:
        return placeholder_list(get_handler(template.event_type).placeholders)

    @admin.display(description="default")
    def default_body(self, template: MessageTemplate) -> str:
        return get_handler(template.event_type).message_template

    @admin.display(description="next message")
    def preview(self, template: MessageTemplate):
        preview = message_preview(
            event_type=template.event_type, body=None if template.is_default else template.body
        )
        if preview is None:
            return "— (no recipient has a pending event of this type)"
        return format_html(
            '{}<br><span class="bs-muted">for {} on {}, with the text saved now</span>',
            preview.text,
            preview.recipient,
            preview.occurrence_date.isoformat(),
        )
