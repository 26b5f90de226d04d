"""A destination's recoveries in the console: the count first, then the operator confirms, then the progress.

The Recover page of a destination asks for the states and the window, shows
how many deliveries that is (delivery.actions.recovery.recovery_preview) and
records the recovery only when the operator confirms that number, as Django's
delete confirmation does. The workers do the work; the destination's page
lists its recoveries with their progress (RecoveryInline).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from delivery.actions.recovery import RecoveryRefused, recovery_create, recovery_preview
from delivery.models import RECOVERABLE_STATUSES, Destination, Recovery

DATETIME_INPUT = forms.DateTimeInput(attrs={"type": "datetime-local", "step": 1}, format="%Y-%m-%dT%H:%M:%S")


class RecoveryForm(forms.Form):
    states = forms.MultipleChoiceField(
        choices=[(s.value, s.label) for s in RECOVERABLE_STATUSES],
        initial=[RECOVERABLE_STATUSES[0].value],
        widget=forms.CheckboxSelectMultiple,
        help_text="Dead: given up on. Delivered: accepted by the receiver (for one that lost what it accepted).",
    )
    since = forms.DateTimeField(
        label="From (UTC)",
        widget=DATETIME_INPUT,
        help_text="Deliveries that reached that state at or after this instant…",
    )
    until = forms.DateTimeField(
        label="Until (UTC)", widget=DATETIME_INPUT, help_text="…and before this one (never after now)."
    )

    def __init__(self, *args, destination, **kwargs):
        super().__init__(*args, **kwargs)
        self.destination = destination
        self.count: int | None = None

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None  # Form.clean returns cleaned_data
        if self.errors:
            return cleaned
        try:
            self.count = recovery_preview(destination=self.destination, **cleaned)
        except ValidationError as exc:
            for field, errors in exc.message_dict.items():
                self.add_error(field if field in self.fields else None, errors)
        return cleaned


class RecoveryInline(admin.TabularInline):
    """The destination's recoveries, newest first, with their progress: read only."""

    model = Recovery
    template = "admin/delivery/recovery/inline.html"
    extra = 0
    can_delete = False
    fields = ["requested_at"]
    readonly_fields = ["requested_at"]
    ordering = ["-requested_at", "-id"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_view_permission(self, request, obj=None):
        # Whoever may see the destination sees what was recovered of it.
        return request.user.has_perm("delivery.view_destination")


if TYPE_CHECKING:
    # What the mixin is mixed into, for the type checker (at run time a mixin is a plain class).
    _DestinationAdmin = admin.ModelAdmin[Destination]
else:
    _DestinationAdmin = object


class DestinationRecoveryAdminMixin(_DestinationAdmin):
    """The Recover page of a destination's admin (`<id>/recover/`), and its recoveries on its page."""

    def get_inline_instances(self, request, obj=None):
        inlines = super().get_inline_instances(request, obj)
        # A read-only listing: shown on an existing destination's page, left out of
        # a save, which then neither needs nor checks a formset for it.
        recoveries = RecoveryInline(self.model, self.admin_site)
        if obj is not None and request.method == "GET" and recoveries.has_view_permission(request, obj):
            inlines.append(recoveries)
        return inlines

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        # Before the default ones, whose "<path:object_id>/" would take "<id>/recover/" as an id.
        return [
            path(
                "<path:object_id>/recover/",
                self.admin_site.admin_view(self.recover_view),
                name=f"{prefix}_recover",
            ),
            *super().get_urls(),
        ]

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        context["can_recover"] = obj is not None and self.has_change_permission(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def recover_view(self, request, object_id):
        destination = self.get_object(request, unquote(object_id))
        if destination is None:
            # Django's own (ModelAdmin.change_view uses it); missing from django-stubs.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        if not self.has_change_permission(request, destination):
            raise PermissionDenied
        change_url = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[destination.pk]
        )
        form = RecoveryForm(request.POST or None, destination=destination)
        confirming = False
        if request.method == "POST" and form.is_valid():
            if "_confirm" in request.POST:
                try:
                    recovery = recovery_create(
                        destination=destination, operator=request.user.get_username(), **form.cleaned_data
                    )
                except ValidationError as exc:
                    form.add_error(None, exc.messages)
                except RecoveryRefused as exc:
                    form.add_error(None, str(exc))
                else:
                    self.log_change(
                        request,
                        destination,
                        f"Recovery {recovery.pk} of {recovery.total} deliveries "
                        f"asked by operator {request.user.get_username()}.",
                    )
                    self.message_user(
                        request,
                        f"Recovery recorded: the workers are queuing {recovery.total} deliveries again; "
                        "its progress is below.",
                        messages.SUCCESS,
                    )
                    return HttpResponseRedirect(change_url + "#recoveries-group")
            else:
                confirming = form.count is not None and form.count > 0
        context = {
            **self.admin_site.each_context(request),
            "title": f"Recover deliveries of {destination}",
            "opts": self.opts,
            "original": destination,
            "form": form,
            "confirming": confirming,
            "count": form.count,
            "change_url": change_url,
        }
        return TemplateResponse(request, "admin/delivery/destination/recover.html", context)
