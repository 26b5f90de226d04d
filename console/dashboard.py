"""The operator dashboard: backlog, outcomes, endpoints, live processes and the next 24 hours of sends."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.contrib import admin
from django.core.cache import cache
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from console.widgets import badge, humanize_delay
from delivery import selectors as delivery_selectors
from delivery.destinations import selectors as destination_selectors
from delivery.destinations.selectors import DestinationHealth
from delivery.models import Endpoint, EndpointState
from delivery.rules import conditions
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
    endpoints = destination_selectors.endpoint_list(unhealthy_only=True)
    backlog = destination_selectors.endpoint_backlog(keys=[endpoint.key for endpoint in endpoints])
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


@dataclass(frozen=True)
class Attention:
    """One thing on the dashboard's first card: what is wrong now, and where to look."""

    level: str  # "alert" (red) or "warn"
    text: str
    url: str = ""
    key: str = ""  # for tests and styling


# The dashboard's figures are computed at most once per this many seconds for everyone (every
# operator's page, every web replica: the cache is the database's, CACHE_URL), so pages that
# refresh themselves cost the database one computation per interval however many are open.
FIGURES_FOR = 10
# How often an open dashboard fetches its figures again (templates/admin/dashboard.html).
REFRESH_EVERY = 30
# A due backlog, or a due delivery not sent, older than this needs a look: the scheduler and the
# workers take due work within seconds.
STUCK_AFTER = timedelta(minutes=5)
CACHE_KEY = "console:dashboard:figures"


def dashboard_figures(*, now: datetime) -> dict:
    """Everything the dashboard shows that comes from the database (about twenty bounded queries)."""
    backlog = event_selectors.overdue_summary(now=now)
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    processes = list(processes_recent(now=now))
    for process in processes:
        process.silent_for = humanize_delay(now - process.last_seen_at)
    return {
        "now": now,
        "backlog": backlog,
        "status_counts": event_selectors.event_status_counts(),
        "outcomes": delivery_selectors.delivery_outcome_counts(now=now),
        "delivery_backlog": delivery_selectors.delivery_backlog_counts(),
        "deliveries_due": delivery_selectors.delivery_due_summary(now=now),
        "destinations": sorted(
            destination_selectors.destinations_health(now=now),
            key=lambda health: (health.condition.rank, health.destination.name),
        ),
        "unhealthy_endpoints": unhealthy_endpoints(now=now),
        "processes": processes,
        "zone_data": zone_data_line(processes=processes),
        "pending_per_hour": event_selectors.pending_per_hour(start=this_hour, hours=24),
        "pending_per_type": event_selectors.pending_per_type(start=this_hour, hours=24),
        "this_hour": this_hour,
    }


def cached_figures(*, now: datetime) -> dict:
    figures = cache.get(CACHE_KEY)
    if figures is None or figures["now"] > now or now - figures["now"] >= timedelta(seconds=FIGURES_FOR):
        figures = dashboard_figures(now=now)
        cache.set(CACHE_KEY, figures, FIGURES_FOR)
    return figures


class Stuck(NamedTuple):
    """A backlog that needs a look once its oldest has waited more than STUCK_AFTER, as the dashboard says it."""

    figure: str  # its summary among the figures: a count and the oldest's time
    level: str
    text: str  # with {count} and {late}
    changelist: str
    query: str
    key: str


STUCK = (
    Stuck(
        "backlog",
        "alert",
        "{count} due events not claimed; the oldest is {late} late.",
        "admin:scheduling_event_changelist",
        "?overdue=yes",
        "backlog",
    ),
    Stuck(
        "deliveries_due",
        "warn",
        "{count} deliveries due and not sent; the oldest for {late}.",
        "admin:delivery_delivery_changelist",
        "?status__exact=QUEUED",
        "deliveries-due",
    ),
)


def attention_items(*, figures: dict, missing_kinds: list[str]) -> list[Attention]:
    """What needs an operator now, most urgent first: destinations, stuck work, processes, zone data."""
    now = figures["now"]
    items = [
        *(
            _destination_attention(health=health, now=now)
            for health in figures["destinations"]
            if health.condition.needs_attention
        ),
        *_stuck_attention(figures=figures, now=now),
        *(_missing_process_attention(kind=kind) for kind in missing_kinds),
        *_lost_process_attention(processes=figures["processes"]),
        *_zone_data_attention(zone=figures["zone_data"]),
    ]
    return sorted(items, key=lambda item: item.level != "alert")


def _destination_attention(*, health: DestinationHealth, now: datetime) -> Attention:
    """A destination failing, degraded or paused: its condition, its dead, its last failure and delivery."""
    detail = f" {health.dead_last_day} dead in 24 h" if health.dead_last_day else ""
    last = health.endpoint_last_error or health.last_failure_label
    return Attention(
        "alert" if health.condition.level == conditions.FAILING else "warn",
        f"Destination {health.destination.name}: {health.condition.label}.{detail}"
        + (f"; last failure: {last}" if last else "")
        + (
            f"; last delivered {humanize_delay(now - health.last_delivered_at)} ago"
            if health.last_delivered_at
            else "; never delivered"
        ),
        reverse("admin:delivery_destination_change", args=[health.destination.pk]),
        f"destination-{health.destination.pk}",
    )


def _stuck_attention(*, figures: dict, now: datetime) -> Iterator[Attention]:
    """Each of STUCK whose oldest has waited more than STUCK_AFTER."""
    for stuck in STUCK:
        due = figures[stuck.figure]
        if due.count and due.oldest and now - due.oldest > STUCK_AFTER:
            yield Attention(
                stuck.level,
                stuck.text.format(count=due.count, late=humanize_delay(now - due.oldest)),
                reverse(stuck.changelist) + stuck.query,
                stuck.key,
            )


def _missing_process_attention(*, kind: str) -> Attention:
    return Attention(
        "alert",
        f"No {kind} is running: "
        + (
            "due events are not being claimed."
            if kind == ProcessKind.SCHEDULER
            else "queued deliveries are not being sent."
        ),
        "#processes-module",
        f"no-{kind}",
    )


def _lost_process_attention(*, processes: list) -> list[Attention]:
    lost = [p for p in processes if p.state == "lost"]
    if not lost:
        return []
    return [
        Attention(
            "warn",
            f"{len(lost)} process{'es' if len(lost) > 1 else ''} lost (silent, not stopped cleanly): "
            + ", ".join(f"{p.get_kind_display().lower()} {p.host}:{p.pid}" for p in lost[:5]),
            "#processes-module",
            "lost",
        )
    ]


def _zone_data_attention(*, zone: ZoneDataLine) -> list[Attention]:
    if not (zone.out_of_step or zone.web_out_of_step):
        return []
    return [
        Attention(
            "warn",
            "Some processes compute with other time zone data than the pending events follow.",
            "#zone-data",
            "zone-data",
        )
    ]


def dashboard_view(request, *, site: admin.AdminSite, as_index: bool = False):
    """What an operator checks first: what needs attention, then backlog, outcomes, destinations, processes.

    `?fragment=1` answers the page's live part alone: the page fetches it every
    REFRESH_EVERY seconds and swaps it in, without a reload.
    """
    context = {
        **site.each_context(request),
        "title": "Dashboard",
        "refresh_every": REFRESH_EVERY,
        **dashboard_context(figures=cached_figures(now=timezone.now())),
        "as_index": as_index,
        "app_list": site.get_app_list(request) if as_index else [],
    }
    if request.GET.get("fragment"):
        return TemplateResponse(request, "admin/dashboard_live.html", context)
    return TemplateResponse(request, "admin/dashboard.html", context)


def dashboard_context(*, figures: dict) -> dict:
    """What the dashboard's template shows of `figures`, as of when they were computed."""
    processes = figures["processes"]
    missing_kinds = [
        kind
        for kind in ProcessKind.values
        if not any(p.kind == kind and p.state == "running" for p in processes)
    ]
    status_counts = figures["status_counts"]
    backlog = figures["backlog"]
    as_of = figures["now"]
    return {
        "now": as_of,
        "attention": attention_items(figures=figures, missing_kinds=missing_kinds),
        "status_counts": [
            (EventStatus(status).label, status, counted, badge(status))
            for status, counted in status_counts.items()
        ],
        "any_estimated": any(not counted.exact for counted in status_counts.values()),
        "backlog": backlog,
        "backlog_late_by": humanize_delay(as_of - backlog.oldest) if backlog.oldest else None,
        "outcomes": figures["outcomes"],
        "delivery_backlog": figures["delivery_backlog"],
        "destinations": figures["destinations"],
        "unhealthy_endpoints": figures["unhealthy_endpoints"],
        "processes": processes,
        "missing_kinds": missing_kinds,
        "lost_after": ProcessHeartbeat.LOST_AFTER_SECONDS,
        "zone_data": figures["zone_data"],
        "chart": hourly_chart(figures["pending_per_hour"]),
        "chart_by_type": [
            (EventType(event_type).label, event_type, count)
            for event_type, count in figures["pending_per_type"].items()
        ],
        "chart_until": figures["this_hour"] + timedelta(hours=24),
        "process_badges": {state: badge(state) for state in ("running", "lost", "stopped")},
    }
