"""The operator dashboard: backlog, outcomes, endpoints, live processes and the next 24 hours of sends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils import timezone

from console.widgets import badge, humanize_delay
from delivery import selectors as delivery_selectors
from delivery.models import Endpoint, EndpointState
from runtime.models import ProcessHeartbeat, ProcessKind
from runtime.selectors import processes_recent
from scheduling import selectors as event_selectors
from scheduling.models import EventStatus, EventType, EventZoneData
from scheduling.zonedata import zone_data_version

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


def hourly_chart(buckets: list[tuple[datetime, int]], *, width: int = 760, height: int = 220) -> Chart:
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
        (round(top + plot_height - plot_height * step / 4, 1), scale_max * step // 4) for step in range(0, 5)
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


@dataclass(frozen=True)
class EndpointLine:
    """One endpoint that is not healthy, as the dashboard says it."""

    endpoint: Endpoint
    since: datetime | None  # failing since, or paused at
    for_how_long: str
    queued: int


def unhealthy_endpoints(*, now: datetime) -> list[EndpointLine]:
    """The failing and paused endpoints, with how long and what waits on them (two queries at most)."""
    endpoints = delivery_selectors.endpoint_list(unhealthy_only=True)
    backlog = delivery_selectors.endpoint_backlog(keys=[endpoint.key for endpoint in endpoints])
    lines = []
    for endpoint in endpoints:
        since = endpoint.paused_at if endpoint.state == EndpointState.PAUSED else endpoint.failing_since
        lines.append(
            EndpointLine(
                endpoint=endpoint,
                since=since,
                for_how_long=humanize_delay(now - since) if since else "",
                queued=backlog[endpoint.key].queued,
            )
        )
    return lines


@dataclass(frozen=True)
class ZoneDataLine:
    """Which time zone data the pending events follow, and who computes with other data."""

    events: EventZoneData
    web: str  # the version this web process validates and computes with
    moved: int  # events the last (or the running) pass moved
    moved_by_zone: list[tuple[str, int]]  # the zones that moved most, most first
    # Running processes computing with data the events neither follow nor are moving to.
    out_of_step: list
    web_out_of_step: bool


def zone_data_line(*, processes: list) -> ZoneDataLine:
    events = event_selectors.events_zone_data()
    agreed = {events.version, events.pass_version} - {""}
    moved = sorted(events.moved.items(), key=lambda item: (-item[1], item[0]))
    return ZoneDataLine(
        events=events,
        web=zone_data_version(),
        moved=sum(count for _, count in moved),
        moved_by_zone=moved[:5],
        out_of_step=[
            process
            for process in processes
            if process.state == "running" and agreed and process.zone_data and process.zone_data not in agreed
        ],
        web_out_of_step=bool(agreed) and zone_data_version() not in agreed,
    )


def dashboard_view(request, *, site: admin.AdminSite):
    """One page with what an operator checks first: backlog, outcomes, endpoints, processes, what's next."""
    now = timezone.now()
    backlog = event_selectors.overdue_summary(now=now)
    # Exact for what is in flight (and, above, for what is due); estimated for
    # the PENDING events, an index entry per recipient, and the handled
    # history, whose counts would read all of them on every view.
    status_counts = {
        **event_selectors.event_status_estimates(),
        EventStatus.PROCESSING: event_selectors.event_processing_count(),
    }
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    chart = hourly_chart(event_selectors.pending_per_hour(start=this_hour, hours=24))
    per_type = event_selectors.pending_per_type(start=this_hour, hours=24)
    processes = list(processes_recent(now=now))
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
        "estimated_statuses": [EventStatus.PENDING, EventStatus.COMPLETED, EventStatus.FAILED],
        "events_total": sum(status_counts.values()),
        "backlog": backlog,
        "backlog_late_by": humanize_delay(now - backlog.oldest) if backlog.oldest else None,
        "outcomes": delivery_selectors.delivery_outcome_counts(now=now),
        "delivery_backlog": delivery_selectors.delivery_backlog_counts(),
        "unhealthy_endpoints": unhealthy_endpoints(now=now),
        "processes": processes,
        "missing_kinds": [
            kind
            for kind in ProcessKind.values
            if not any(p.kind == kind and p.state == "running" for p in processes)
        ],
        "lost_after": ProcessHeartbeat.LOST_AFTER_SECONDS,
        "zone_data": zone_data_line(processes=processes),
        "chart": chart,
        "chart_by_type": [
            (EventType(event_type).label, event_type, count) for event_type, count in per_type.items()
        ],
        "chart_until": this_hour + timedelta(hours=24),
        "process_badges": {state: badge(state) for state in ("running", "lost", "stopped")},
    }
    return TemplateResponse(request, "admin/dashboard.html", context)
