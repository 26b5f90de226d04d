"""The failures page: dead deliveries grouped by destination and cause, with an action for each group.

One row per (destination, cause) of delivery.selectors.failure_groups: counts,
first and last seen, the latest few deliveries. Acknowledge takes a group off
the list until a new failure of its cause; Resend queues its dead deliveries
again, after a confirmation saying how many. Both post to this page and go
through delivery.actions.failures.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from delivery.actions.failures import RESEND_AT_ONCE, failure_group_acknowledge, failure_group_resend
from delivery.models import Destination
from delivery.rules import failure_causes as failures
from delivery.selectors import FAILURE_WINDOW, failure_group_deliveries, failure_groups

WINDOWS = {
    "1h": ("Last hour", timedelta(hours=1)),
    "24h": ("Last 24 hours", timedelta(days=1)),
    "7d": ("Last 7 days", FAILURE_WINDOW),
}
DEFAULT_WINDOW = "7d"
VIEW_PERMISSION = "delivery.view_delivery"
CHANGE_PERMISSION = "delivery.change_delivery"


def failures_view(request, *, site: admin.AdminSite):
    if not request.user.has_perm(VIEW_PERMISSION):
        raise PermissionDenied
    if request.method == "POST":
        return _act(request, site=site)
    now = timezone.now()
    window = request.GET.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        window = DEFAULT_WINDOW
    destination_id = _int(request.GET.get("destination"))
    groups = failure_groups(now=now, since=now - WINDOWS[window][1], destination_id=destination_id)
    context = {
        **site.each_context(request),
        "title": "Failures by cause",
        "now": now,
        "groups": groups,
        "windows": [(key, label) for key, (label, _) in WINDOWS.items()],
        "window": window,
        "destinations": list(Destination.objects.order_by("name").values_list("pk", "name")),
        "destination_id": destination_id,
        "can_act": request.user.has_perm(CHANGE_PERMISSION),
        "dead_total": sum(group.count for group in groups),
    }
    return TemplateResponse(request, "admin/failures.html", context)


def _act(request, *, site: admin.AdminSite):
    if not request.user.has_perm(CHANGE_PERMISSION):
        raise PermissionDenied
    back = reverse("admin:failures") + (f"?{request.GET.urlencode()}" if request.GET else "")
    destination_id = _int(request.POST.get("destination"))
    destination = (
        Destination.objects.filter(pk=destination_id).first() if destination_id is not None else None
    )
    cause = request.POST.get("cause", "")
    action = request.POST.get("action")
    if destination is None or not failures.is_cause(cause) or action not in ("acknowledge", "resend"):
        messages.error(
            request, "Nothing was done: that group of failures is not known (its destination was deleted?)."
        )
        return HttpResponseRedirect(back)
    group = _Group(
        destination=destination, cause=cause, label=f"{destination.name}, {failures.cause_label(cause)}"
    )
    if action == "acknowledge":
        _acknowledge(request, group=group)
    elif request.POST.get("confirmed") != "yes":
        return _resend_confirmation(request, site=site, group=group, back=back)
    else:
        _resend(request, group=group)
    return HttpResponseRedirect(back)


@dataclass(frozen=True)
class _Group:
    """The group of failures an action names: its destination, its cause, and how the page names both."""

    destination: Destination
    cause: str
    label: str


def _acknowledge(request, *, group: _Group) -> None:
    now = timezone.now()
    through = _moment(request.POST.get("through")) or now
    failure_group_acknowledge(
        destination=group.destination,
        cause=group.cause,
        through=through,
        operator=request.user.get_username(),
        now=now,
    )
    messages.success(
        request,
        f"Acknowledged the failures of {group.label} seen until {through:%Y-%m-%d %H:%M:%S} UTC: the group comes "
        "back if one more fails this way. The deliveries were not changed.",
    )


def _resend_confirmation(request, *, site: admin.AdminSite, group: _Group, back: str) -> TemplateResponse:
    count = failure_group_deliveries(
        destination_id=group.destination.pk, cause=group.cause, now=timezone.now()
    ).count()
    return TemplateResponse(
        request,
        "admin/failures_resend_confirm.html",
        {
            **site.each_context(request),
            "title": "Resend this group of failures?",
            "destination": group.destination,
            "cause": group.cause,
            "label": group.label,
            "count": count,
            "at_once": min(count, RESEND_AT_ONCE),
            "more": max(count - RESEND_AT_ONCE, 0),
            "back": back,
        },
    )


def _resend(request, *, group: _Group) -> None:
    result = failure_group_resend(
        destination=group.destination,
        cause=group.cause,
        operator=request.user.get_username(),
        now=timezone.now(),
    )
    text = f"Resent {result.resent} dead deliveries of {group.label}: queued again under their own keys."
    if result.refused:
        text += f" {result.refused} had changed meanwhile and were left as they are."
    if result.remaining:
        text += (
            f" {result.remaining} remain dead in this group: resend it again for the next {RESEND_AT_ONCE}."
        )
    messages.success(request, text)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _moment(value: str | None) -> datetime | None:
    try:
        moment = parse_datetime(value or "")
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None
