"""The operator console: titles, the dashboard page, and the status badges the admins share.

Django's default admin.site is kept (the project's INSTALLED_APPS names
django.contrib.admin, not a custom AdminConfig); `install()` adds the dashboard
URL to it and is called once from scheduling/admin.py, which admin autodiscovery
imports before config/urls.py reads `admin.site.urls`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.html import format_html

from scheduling import selectors
from scheduling.models import EventStatus, ProcessHeartbeat, ProcessKind

TITLE = "Birthday scheduler operations"

# Status -> badge colour. Shared by events, deliveries, attempts and processes.
BADGE_COLOURS = {
    # events
    "PENDING": "#4a6f8a",
    "PROCESSING": "#b7791f",
    "COMPLETED": "#2f855a",
    "FAILED": "#c53030",
    # deliveries
    "QUEUED": "#4a6f8a",
    "SENDING": "#b7791f",
    "DELIVERED": "#2f855a",
    "DEAD": "#c53030",
    # attempts
    "TRANSIENT_FAILURE": "#b7791f",
    "PERMANENT_FAILURE": "#c53030",
    "ABANDONED": "#6b46c1",
    # processes
    "running": "#2f855a",
    "lost": "#c53030",
    "stopped": "#718096",
    # an overdue PENDING event
    "OVERDUE": "#dd6b20",
}


def badge(value: str, label: str | None = None):
    """A coloured pill for a status value (white text, so readable in both themes)."""
    return format_html(
        '<span class="bs-badge" style="background:{}">{}</span>',
        BADGE_COLOURS.get(value, "#718096"),
        label or value,
    )


def humanize_delay(delta: timedelta) -> str:
    """'3 d 4 h', '2 h 05 min', '12 min', '40 s'."""
    seconds = int(delta.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def split_local_time(iso: str) -> tuple[str, str]:
    """'2027-03-14T09:00:00.5-04:00' -> ('2027-03-14 09:00', '-04:00'), whatever the precision."""
    try:
        local = datetime.fromisoformat(iso)
    except ValueError:
        return iso, ""
    offset = local.isoformat()[-6:] if local.utcoffset() is not None else ""
    return local.strftime("%Y-%m-%d %H:%M"), offset


# --- the chart -----------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    count: int
    hour: datetime
    label: str  # the hour under the bar ("" where labels would crowd)


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_top: int
    plot_bottom: int
    bars: list[Bar]
    max_count: int
    total: int
    gridlines: list[tuple[float, int]]  # (y, value)


def hourly_chart(
    buckets: list[tuple[datetime, int]], *, width: int = 760, height: int = 220
) -> Chart:
    """Lay out an SVG bar chart of counts per hour (geometry only; the template draws it)."""
    left, right, top, bottom = 44, 8, 12, 28
    plot_height = height - top - bottom
    max_count = max((count for _, count in buckets), default=0)
    scale_max = _nice_ceiling(max_count)
    slot = (width - left - right) / max(len(buckets), 1)
    bars = []
    for index, (hour, count) in enumerate(buckets):
        bar_height = plot_height * count / scale_max if scale_max else 0
        bars.append(
            Bar(
                x=round(left + index * slot + slot * 0.15, 1),
                y=round(top + plot_height - bar_height, 1),
                width=round(slot * 0.7, 1),
                height=round(bar_height, 1),
                count=count,
                hour=hour,
                label=f"{hour:%H}" if index % 3 == 0 else "",
            )
        )
    gridlines = [
        (round(top + plot_height - plot_height * step / 4, 1), scale_max * step // 4)
        for step in range(0, 5)
    ]
    return Chart(
        width=width,
        height=height,
        plot_top=top,
        plot_bottom=top + plot_height,
        bars=bars,
        max_count=max_count,
        total=sum(count for _, count in buckets),
        gridlines=gridlines if scale_max else [(top + plot_height, 0)],
    )


def _nice_ceiling(value: int) -> int:
    """The smallest 'round' number (1, 2, 4 or 5 x 10^n, divisible by 4) >= value."""
    if value <= 0:
        return 0
    magnitude = 1
    while True:
        for step in (4, 8, 20, 40):
            candidate = step * magnitude
            if candidate >= value:
                return candidate
        magnitude *= 10


# --- the dashboard ----------------------------------------------------------------------


def dashboard_view(request, *, site: admin.AdminSite):
    """One page with what an operator checks first: backlog, outcomes, processes, what's next."""
    now = timezone.now()
    backlog = selectors.overdue_summary(now=now)
    status_counts = selectors.event_status_counts()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    chart = hourly_chart(selectors.pending_per_hour(start=this_hour, hours=24))
    processes = list(selectors.processes_recent(now=now))
    for process in processes:
        process.silent_for = humanize_delay(now - process.last_seen_at)
    context = {
        **site.each_context(request),
        "title": "Dashboard",
        "now": now,
        "status_counts": [
            (EventStatus(status).label, status, count, badge(status))
            for status, count in status_counts.items()
        ],
        "events_total": sum(status_counts.values()),
        "backlog": backlog,
        "backlog_late_by": humanize_delay(now - backlog.oldest) if backlog.oldest else None,
        "outcomes": selectors.delivery_outcome_counts(now=now),
        "delivery_backlog": selectors.delivery_backlog_counts(),
        "processes": processes,
        "missing_kinds": [
            kind
            for kind in ProcessKind.values
            if not any(p.kind == kind and p.state == "running" for p in processes)
        ],
        "lost_after": ProcessHeartbeat.LOST_AFTER_SECONDS,
        "chart": chart,
        "chart_until": this_hour + timedelta(hours=24),
        "process_badges": {state: badge(state) for state in ("running", "lost", "stopped")},
    }
    return TemplateResponse(request, "admin/dashboard.html", context)


def install(site: admin.AdminSite) -> None:
    """Title the console and add /<ADMIN_URL>dashboard/ (named admin:dashboard) to `site`."""
    site.site_header = TITLE
    site.site_title = TITLE
    site.index_title = TITLE
    if getattr(site, "_console_installed", False):
        return
    original_get_urls = site.get_urls

    def dashboard(request):
        return dashboard_view(request, site=site)

    def get_urls():
        return [
            path("dashboard/", site.admin_view(dashboard), name="dashboard"),
            *original_get_urls(),
        ]

    site.get_urls = get_urls
    site._console_installed = True


class ReadOnlyInlineMixin:
    """Inlines that show history: no adding, editing or deleting rows in place."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
