"""The database-wide gauges of /metrics, read when Prometheus scrapes.

Every query reads a range of an index bounded by what is due or in flight or
what happened lately (the backlogs through their partial indexes, the last
hour by time), never the handled history nor an entry per recipient, so a
scrape costs the same after years of history and at any number of
recipients. How many events wait in all and how much history there is come
from PostgreSQL's own row estimates, labelled as such (the *_estimated families). Two more queries for the
endpoints: their table (a row per webhook URL) and what waits on them (the
unfinished deliveries only); one for the one row saying which time zone data the
pending events follow; three for the destinations' health (their table, their
endpoints, and a week's dead deliveries by destination). Nothing is kept between scrapes: every web
replica answers the same, so Prometheus scrapes one. What each process
measures about itself (attempt and claim durations) is not here but on that
process's own port (delivery.metrics).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from django.db import DatabaseError
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from delivery.destinations.selectors import (
    DestinationHealth,
    destinations_health,
    endpoint_backlog,
    endpoint_destination_names,
    endpoint_list,
)
from delivery.models import DeliveryStatus, Endpoint, EndpointState
from delivery.rules import conditions
from delivery.selectors import (
    attempt_outcome_counts,
    delivery_backlog_counts,
    delivery_due_summary,
    delivery_finished_counts,
    delivery_status_estimates,
)
from runtime.database import database_error_reason
from runtime.models import ProcessHeartbeat
from runtime.selectors import process_live_counts
from scheduling.models import EventStatus
from scheduling.pauses import EVENT_TYPE_PAUSED, RECIPIENT_PAUSED
from scheduling.selectors import (
    event_processing_count,
    event_status_estimates,
    events_held_back_counts,
    events_zone_data,
    overdue_summary,
)
from scheduling.zonedata import zone_data_version

logger = logging.getLogger(__name__)

# What a family built from rows has a series of each: a destination's health, an endpoint.
Row = TypeVar("Row")

# The window of birthday_delivery_attempts_last_hour and birthday_deliveries_finished_last_hour.
ATTEMPTS_WINDOW = timedelta(hours=1)
ESTIMATE_NOTE = (
    "PostgreSQL's estimate (the table's row estimate times the status's share in its column statistics, "
    "as of the last VACUUM or ANALYZE), not a count: counting the handled history exactly would read "
    "all of it on every scrape."
)
PENDING_ESTIMATE_NOTE = (
    "PENDING is the entry count of their partial index (event_pending_due_idx), exact as of the table's last "
    "VACUUM, sampled as of an ANALYZE since: counting them would read an entry per recipient on every scrape; "
    "the due ones are counted exactly in birthday_events_due."
)


class DatabaseCollector:
    """Yields the birthday_* gauges as of `now`; birthday_database_up 0 alone if the database fails."""

    def __init__(self, *, now: datetime) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        try:
            # Read everything before yielding anything, so a failure half-way
            # never produces a partial scrape.
            families, up = list(self._families()), 1
        except DatabaseError as exc:
            logger.warning("Metrics: database unavailable", extra={"error": database_error_reason(exc)})
            families, up = [], 0
        yield _gauge("birthday_database_up", "1 if the database answered this scrape's queries, else 0.", up)
        yield from families

    def _families(self) -> Iterator[Metric]:
        now = self.now
        yield from _event_families(now=now)
        yield from _delivery_families(now=now)
        yield _labelled(
            "birthday_processes_live",
            f"Scheduler and worker processes running, with a heartbeat under "
            f"{ProcessHeartbeat.LOST_AFTER_SECONDS} s old.",
            "kind",
            process_live_counts(now=now),
        )
        yield _labelled(
            "birthday_delivery_attempts_last_hour",
            "Delivery attempts that finished in the last hour, by outcome, from every worker "
            "(abandoned: logged when a lost worker's lease was taken over).",
            "outcome",
            attempt_outcome_counts(since=now - ATTEMPTS_WINDOW),
        )
        yield from _endpoint_families(now=now, endpoints=endpoint_list())
        yield from _destination_families(health=destinations_health(now=now))
        yield from _zone_data_families()


def _event_families(*, now: datetime) -> Iterator[Metric]:
    """The birthday_events* gauges: claimed, estimated, held back by a pause, and the scheduler's backlog."""
    yield _labelled(
        "birthday_events",
        "Events claimed and not yet handled (PROCESSING, delivery under way), counted exactly. PENDING and "
        "handled ones are in birthday_events_estimated.",
        "status",
        {EventStatus.PROCESSING: event_processing_count()},
    )
    yield _labelled(
        "birthday_events_estimated",
        f"Events in each status, estimated. {PENDING_ESTIMATE_NOTE} The others: {ESTIMATE_NOTE}",
        "status",
        event_status_estimates(),
    )
    held_back = events_held_back_counts(since=now - ATTEMPTS_WINDOW)
    yield _labelled(
        "birthday_events_paused_last_hour",
        'Events whose send time came in the last hour while their recipient (paused="recipient") or their '
        'event type (paused="event_type") was paused: FAILED, not sent, counted exactly.',
        "paused",
        {"recipient": held_back[RECIPIENT_PAUSED], "event_type": held_back[EVENT_TYPE_PAUSED]},
    )
    overdue = overdue_summary(now=now)
    yield _gauge(
        "birthday_events_due",
        "PENDING events whose target time has passed: the scheduler's backlog.",
        overdue.count,
    )
    yield _gauge(
        "birthday_events_oldest_due_age_seconds",
        "Seconds since the target time of the oldest due PENDING event (0 when none is due).",
        _age(now, overdue.oldest),
    )


def _delivery_families(*, now: datetime) -> Iterator[Metric]:
    """The birthday_deliveries* gauges: unfinished, finished lately, estimated, and the workers' backlog."""
    backlog = delivery_backlog_counts()
    yield _labelled(
        "birthday_deliveries",
        "Deliveries not finished, counted exactly: QUEUED (waiting for their next attempt) and SENDING "
        "(under a worker's lease). Finished ones are in birthday_deliveries_finished_last_hour "
        "and birthday_deliveries_estimated.",
        "status",
        {DeliveryStatus.QUEUED: backlog["queued"], DeliveryStatus.SENDING: backlog["sending"]},
    )
    yield _labelled(
        "birthday_deliveries_finished_last_hour",
        "Deliveries that became DELIVERED or DEAD (given up) in the last hour, counted exactly "
        "(a DEAD one resent since is QUEUED again and not counted).",
        "status",
        delivery_finished_counts(since=now - ATTEMPTS_WINDOW),
    )
    yield _labelled(
        "birthday_deliveries_estimated",
        f"Deliveries in each status, estimated: {ESTIMATE_NOTE}",
        "status",
        delivery_status_estimates(),
    )
    due = delivery_due_summary(now=now)
    yield _gauge(
        "birthday_deliveries_due",
        "QUEUED deliveries whose next attempt time has passed: the workers' backlog.",
        due.count,
    )
    yield _gauge(
        "birthday_deliveries_oldest_due_age_seconds",
        "Seconds since the oldest due QUEUED delivery became due (0 when none is due).",
        _age(now, due.oldest),
    )


def _destination_families(*, health: list[DestinationHealth]) -> Iterator[Metric]:
    """The birthday_destination_* gauges: one series per destination (by name), from delivery.rules.conditions.

    Where birthday_endpoint_state says whether a receiver is up, these say
    whether what is sent to it gets through: a receiver answering 400 to
    everything stays HEALTHY while every delivery to it ends DEAD.
    """
    rows = [(line.destination.name, line) for line in health]
    yield _one_hot(
        "birthday_destination_condition",
        "1 for the destination's condition (failing, degraded, paused, ok, idle, disabled), 0 for the others: "
        "failing also when its deliveries end DEAD with nothing delivered since (delivery.rules.conditions).",
        labels=("destination", "condition"),
        rows=[(name, line.condition.level) for name, line in rows],
        values=conditions.ORDER,
    )
    series: list[_Series[DestinationHealth]] = [
        _Series(
            "birthday_destination_needs_attention",
            "1 when the destination is failing, degraded or paused, else 0.",
            lambda line: 1 if line.condition.needs_attention else 0,
        ),
        _Series(
            "birthday_destination_dead_last_hour",
            "Deliveries to the destination that ended DEAD in the last hour, counted exactly.",
            lambda line: line.dead_last_hour,
        ),
        _Series(
            "birthday_destination_dead_last_day",
            "Deliveries to the destination that ended DEAD in the last 24 hours, counted exactly.",
            lambda line: line.dead_last_day,
        ),
        _Series(
            "birthday_destination_last_delivered_timestamp_seconds",
            "When a delivery to the destination's URL was last accepted (Unix time; 0: never).",
            lambda line: line.last_delivered_at.timestamp() if line.last_delivered_at else 0,
        ),
    ]
    yield from _per_row(label="destination", rows=rows, series=series)


def _zone_data_families() -> Iterator[Metric]:
    """The time zone data this web process validates and computes with, and the data the PENDING events follow.

    Schedulers and workers serve their own birthday_zone_data_info on their
    metrics port, so one rule compares every process with the events (deploy/prometheus/alerts.yml).
    """
    yield InfoMetricFamily(
        "birthday_zone_data",
        "The IANA version of the time zone database this process computes with.",
        value={"version": zone_data_version()},
    )
    events = events_zone_data()
    yield InfoMetricFamily(
        "birthday_events_zone_data",
        "The IANA version whose rules every PENDING event's instant follows (unknown before a scheduler's "
        "first pass), and the version a pass in progress moves them to (empty when none runs).",
        value={"version": events.version or "unknown", "moving_to": events.pass_version},
    )


def _endpoint_families(*, now: datetime, endpoints: list[Endpoint]) -> Iterator[Metric]:
    """The birthday_endpoint_* gauges: one series per endpoint and label value.

    The `endpoint` label is its destination's name (`endpoint <id>` for one no destination has): never
    the URL, which is a credential (delivery.credentials.receiver_urls).
    """
    waiting = endpoint_backlog(keys=[endpoint.key for endpoint in endpoints])
    names = endpoint_destination_names(endpoints=endpoints)
    rows = [(names.get(endpoint.key) or f"endpoint {endpoint.pk}", endpoint) for endpoint in endpoints]
    yield _one_hot(
        "birthday_endpoint_state",
        "1 for the endpoint's current state (HEALTHY, FAILING, PAUSED, GONE), 0 for the others.",
        labels=("endpoint", "state"),
        rows=[(name, endpoint.state) for name, endpoint in rows],
        values=EndpointState.values,
    )
    series: list[_Series[Endpoint]] = [
        _Series(
            "birthday_endpoint_consecutive_failures",
            "Endpoint-level failures in a row since its last success, over all workers.",
            lambda endpoint: endpoint.consecutive_failures,
        ),
        _Series(
            "birthday_endpoint_waiting_deliveries",
            "QUEUED deliveries to the endpoint (due or waiting for a retry).",
            lambda endpoint: waiting[endpoint.key].queued,
        ),
        _Series(
            "birthday_endpoint_failing_seconds",
            "Seconds since the endpoint became FAILING (0 when it is not failing).",
            lambda endpoint: _age(now, endpoint.failing_since)
            if endpoint.state == EndpointState.FAILING
            else 0,
        ),
        _Series(
            "birthday_endpoint_paused_seconds",
            "Seconds since an operator paused the endpoint (0 when it is not paused).",
            lambda endpoint: _age(now, endpoint.paused_at) if endpoint.state == EndpointState.PAUSED else 0,
        ),
    ]
    yield from _per_row(label="endpoint", rows=rows, series=series)


@dataclass(frozen=True)
class _Series(Generic[Row]):
    """One gauge family with a series per row: its name, its help, and each row's value."""

    name: str
    documentation: str
    value: Callable[[Row], float]


def _per_row(*, label: str, rows: list[tuple[str, Row]], series: list[_Series[Row]]) -> Iterator[Metric]:
    """Each of `series` as a family, with one series per row, labelled `label` with the row's name."""
    for one in series:
        family = GaugeMetricFamily(one.name, one.documentation, labels=[label])
        for name, row in rows:
            family.add_metric([name], one.value(row))
        yield family


def _one_hot(
    name: str,
    documentation: str,
    *,
    labels: tuple[str, str],
    rows: list[tuple[str, str]],
    values: Iterable[str],
) -> GaugeMetricFamily:
    """A series per row and value: 1 for the row's current value, 0 for the others.

    Every value's series exists, at 0 when not current, so a move is a
    change of value that alerts and graphs see, not a series vanishing.
    """
    family = GaugeMetricFamily(name, documentation, labels=list(labels))
    for row_name, current in rows:
        for value in values:
            family.add_metric([row_name, value], 1 if current == value else 0)
    return family


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _labelled(name: str, documentation: str, label: str, values: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for label_value, value in values.items():
        family.add_metric([label_value], value)
    return family


def _age(now: datetime, since: datetime | None) -> float:
    return max(0.0, (now - since).total_seconds()) if since else 0.0
