"""Endpoints (webhook receivers) in the operator console: their health, what waits on them, Pause and Resume.

Workers create and move these rows; an operator only reads them and pauses or
resumes, through the services, which own the state machine.
"""

from __future__ import annotations

from datetime import datetime

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from console import widgets
from console.admin.row_values import row_value, row_value_set
from delivery.destinations.selectors import Backlog, endpoint_backlog, endpoint_destination_names
from delivery.models import Endpoint, EndpointState
from delivery.rules import failure_causes as failures
from delivery.states.endpoints import endpoint_pause, endpoint_resume

# The shared palette's keys whose colours say the same thing: green flowing,
# red failing or gone, orange held by a person.
_STATE_BADGE_KEYS: dict[str, str] = {
    EndpointState.HEALTHY: "COMPLETED",
    EndpointState.FAILING: "FAILED",
    EndpointState.PAUSED: "OVERDUE",
    # Red as a dead delivery: nothing more goes until a person acts.
    EndpointState.GONE: "DEAD",
}
LAST_ERROR_SHOWN = 80


def _instant(moment: datetime):
    return widgets.when(moment)


def endpoint_state_badge(endpoint: Endpoint):
    return widgets.badge(_STATE_BADGE_KEYS.get(endpoint.state, endpoint.state), endpoint.get_state_display())


class EndpointChangeList(ChangeList):
    """The change list, with what waits on each endpoint of the page read in one query."""

    def get_results(self, request):
        super().get_results(request)
        # A list, so the backlog set on each row below is what the columns read.
        self.result_list = list(self.result_list)
        backlog = endpoint_backlog(keys=[endpoint.key for endpoint in self.result_list])
        names = endpoint_destination_names(endpoints=self.result_list)
        for endpoint in self.result_list:
            row_value_set(endpoint, "backlog", backlog[endpoint.key])
            row_value_set(endpoint, "destination_name", names.get(endpoint.key))


@admin.register(Endpoint)
class EndpointAdmin(widgets.ViewOnlyPageMixin, admin.ModelAdmin):
    # Health is the workers' record of the receiver's answers: nobody edits it by hand.
    list_display = [
        "receiver",
        "state_badge",
        "queued",
        "sending",
        "failing_for",
        "last_error_short",
        "next_probe",
        "paused",
        "last_success",
    ]
    list_display_links = ["receiver"]
    list_filter = ["state"]
    search_fields = ["url_display"]
    list_per_page = 50
    actions = ["pause", "resume"]
    change_form_template = "admin/delivery/endpoint/change_form.html"
    fieldsets = [
        (None, {"fields": ["receiver", "state_badge", "waiting", "paused_by", "paused_at"]}),
        (
            "Health",
            {
                "fields": [
                    "consecutive_failures",
                    "failing_since",
                    "last_failure_at",
                    "last_error",
                    "next_probe_at",
                    "probe_interval",
                    "blocked_until",
                    "last_success_at",
                ]
            },
        ),
        ("Fleet limits", {"classes": ["collapse"], "fields": ["rate_second", "rate_taken", "updated_at"]}),
    ]

    def has_add_permission(self, request):
        # A worker creates an endpoint's row the first time it sends to the URL.
        return False

    def has_delete_permission(self, request, obj=None):
        # A worker would create the row again at its next send, healthy,
        # forgetting a pause or a failure the fleet is waiting out.
        return False

    def can_steer(self, request) -> bool:
        """Whether this operator may pause and resume endpoints (delivery.change_endpoint)."""
        return super().has_change_permission(request)

    def get_changelist(self, request, **kwargs):
        return EndpointChangeList

    def get_urls(self):
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        # Before the default ones, whose "<path:object_id>/" would take "<id>/pause/" as an id.
        return [
            path(
                "<path:object_id>/pause/", self.admin_site.admin_view(self.pause_view), name=f"{prefix}_pause"
            ),
            path(
                "<path:object_id>/resume/",
                self.admin_site.admin_view(self.resume_view),
                name=f"{prefix}_resume",
            ),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), "can_steer": self.can_steer(request)}
        )

    # --- columns ------------------------------------------------------------------

    @admin.display(description="receiver", ordering="url_display")
    def receiver(self, endpoint: Endpoint) -> str:
        """Its destination's name and what may be shown of its URL (a credential: the host, never the token)."""
        name = row_value(
            endpoint,
            "destination_name",
            lambda: endpoint_destination_names(endpoints=[endpoint]).get(endpoint.key),
        )
        return f"{name} ({endpoint.url_display})" if name else endpoint.url_display

    @admin.display(description="state", ordering="state")
    def state_badge(self, endpoint: Endpoint):
        return endpoint_state_badge(endpoint)

    @admin.display(description="queued")
    def queued(self, endpoint: Endpoint) -> int:
        return self._backlog(endpoint).queued

    @admin.display(description="in flight")
    def sending(self, endpoint: Endpoint) -> int:
        return self._backlog(endpoint).sending

    @admin.display(description="waiting deliveries")
    def waiting(self, endpoint: Endpoint) -> str:
        backlog = self._backlog(endpoint)
        return f"{backlog.queued} queued, {backlog.sending} in flight"

    @admin.display(description="failing since", ordering="failing_since")
    def failing_for(self, endpoint: Endpoint):
        if endpoint.state != EndpointState.FAILING or endpoint.failing_since is None:
            return "—"
        return format_html(
            '{}<br><span class="bs-late">{} ago</span>',
            _instant(endpoint.failing_since),
            widgets.humanize_delay(timezone.now() - endpoint.failing_since),
        )

    @admin.display(description="last error")
    def last_error_short(self, endpoint: Endpoint):
        # In words, by its class; the worker's own line (cut) on hover, the endpoint's page has it whole.
        error = endpoint.last_error
        if not error:
            return "—"
        return format_html(
            '<span title="{}">{}</span>',
            (error[:LAST_ERROR_SHOWN] + "…") if len(error) > LAST_ERROR_SHOWN else error,
            failures.description_label(error),
        )

    @admin.display(description="next probe", ordering="next_probe_at")
    def next_probe(self, endpoint: Endpoint):
        if endpoint.state != EndpointState.FAILING or endpoint.next_probe_at is None:
            return "—"
        left = endpoint.next_probe_at - timezone.now()
        return format_html(
            '{}<br><span class="bs-muted">{}</span>',
            _instant(endpoint.next_probe_at),
            f"in {widgets.humanize_delay(left)}" if left.total_seconds() > 0 else "due",
        )

    @admin.display(description="last success", ordering="last_success_at")
    def last_success(self, endpoint: Endpoint):
        if endpoint.last_success_at is None:
            return "never"
        return format_html(
            '{}<br><span class="bs-muted">{} ago</span>',
            _instant(endpoint.last_success_at),
            widgets.humanize_delay(timezone.now() - endpoint.last_success_at),
        )

    @admin.display(description="paused by", ordering="paused_at")
    def paused(self, endpoint: Endpoint):
        if endpoint.state != EndpointState.PAUSED:
            return "—"
        return format_html(
            '{}<br><span class="bs-muted">{}</span>',
            endpoint.paused_by or "?",
            _instant(endpoint.paused_at) if endpoint.paused_at else "",
        )

    def _backlog(self, endpoint: Endpoint) -> Backlog:
        # The change list sets it for the whole page; the change page asks for its one row.
        return row_value(endpoint, "backlog", lambda: endpoint_backlog(keys=[endpoint.key])[endpoint.key])

    # --- Pause and Resume: list actions and the change page's buttons --------------

    pause, resume = widgets.pause_resume_actions(
        pause=endpoint_pause,
        resume=endpoint_resume,
        kwarg="endpoint",
        described=(
            "Pause selected endpoints (hold their deliveries)",
            "Resume selected paused or gone endpoints",
        ),
    )

    def pause_view(self, request, object_id):
        return self._steer(request, object_id, action=self.pause)

    def resume_view(self, request, object_id):
        return self._steer(request, object_id, action=self.resume)

    def _steer(self, request, object_id, *, action):
        # A POST only (admin_view adds the CSRF check): a link, a prefetch or a
        # crawler following a GET must never pause deliveries.
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.can_steer(request):
            raise PermissionDenied
        endpoint = self.get_object(request, unquote(object_id))
        if endpoint is None:
            # Django's own (ModelAdmin.change_view uses it); missing from django-stubs.
            return self._get_obj_does_not_exist_redirect(request, self.opts, object_id)  # type: ignore[attr-defined]
        action(request, [endpoint])
        return HttpResponseRedirect(reverse("admin:delivery_endpoint_change", args=[endpoint.pk]))
