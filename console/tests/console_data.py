"""Builders of events, deliveries and heartbeats in given states, for the operator console tests.

Past occurrences are written directly (the scheduler and the worker would have
made them); the recipients and their PENDING events come from the real
services, through the post_save receiver.
"""

from __future__ import annotations

import itertools
from datetime import date, datetime, timedelta

from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from delivery.models import (
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryStatus,
    Destination,
    Endpoint,
    EndpointState,
)
from delivery.states.endpoints import endpoint_for_destination
from delivery.tests.pipeline import endpoint_columns, key_of
from runtime.models import ProcessHeartbeat, ProcessKind
from scheduling.handlers import local_send_instant
from scheduling.models import Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for
from scheduling.times import load_timezone
from users.models import User
from users.tests.factories import UserFactory

_pids = itertools.count(4100)


def past_event(user: User, *, status: str, years_ago: int = 1, **fields) -> Event:
    """An occurrence of the user's birthday `years_ago` years before the pending one."""
    pending = user.events.get(status=EventStatus.PENDING)
    occurrence_date = _years_before(pending.occurrence_date, years_ago)
    occurrence = local_send_instant(occurrence_date, user.timezone)
    return Event.objects.create(
        user=user,
        event_type=EventType.BIRTHDAY,
        status=status,
        occurrence_date=occurrence_date,
        target_timestamp_utc=occurrence.target_utc,
        target_timestamp_local=occurrence.target_local.isoformat(),
        target_timezone=occurrence.timezone_name,
        idempotency_key=idempotency_key_for(
            user_id=user.id, event_type=EventType.BIRTHDAY, occurrence_date=occurrence_date
        ),
        **fields,
    )


def _years_before(day: date, years: int) -> date:
    try:
        return day.replace(year=day.year - years)
    except ValueError:  # Feb 29
        return day.replace(year=day.year - years, day=28)


def delivery_for(
    event: Event,
    *,
    status: str,
    attempts: list[tuple[str, int | None, str]] = (),
    finished_at: datetime | None = None,
    destination: Destination | None = None,
) -> Delivery:
    """A delivery for `event` (to `destination`, if given) with attempts given as (outcome, status code, error)."""
    finished_at = finished_at or timezone.now()
    url = settings.WEBHOOK_URL or "http://127.0.0.1:9/hook"
    if status == DeliveryStatus.DEAD:
        # Its receiver is still known (as if its destination were): a resend has somewhere to go.
        Endpoint.objects.get_or_create(key=key_of(url), defaults=endpoint_columns(url))
    delivery = Delivery.objects.create(
        event=event,
        destination=destination,
        idempotency_key=event.idempotency_key,
        endpoint_key=destination.url_key
        if destination
        else key_of(settings.WEBHOOK_URL or "http://127.0.0.1:9/hook"),
        payload={"message": f"Hey, {event.user.full_name} it's your birthday"},
        status=status,
        attempts=len(attempts),
        max_attempts=max(len(attempts), 3),
        next_attempt_at=finished_at,
        last_status_code=attempts[-1][1] if attempts else None,
        last_error=attempts[-1][2] if attempts else "",
        delivered_at=finished_at if status == DeliveryStatus.DELIVERED else None,
    )
    for number, (outcome, code, error) in enumerate(attempts, start=1):
        started = finished_at - timedelta(seconds=5 * (len(attempts) - number) + 1)
        DeliveryAttempt.objects.create(
            delivery=delivery,
            number=number,
            worker="worker-1:4242:ab12",
            started_at=started,
            finished_at=started + timedelta(milliseconds=180),
            duration_ms=180,
            outcome=outcome,
            status_code=code,
            error=error,
            response_excerpt='{"ok":true}' if outcome == AttemptOutcome.DELIVERED else "upstream timeout",
        )
    # updated_at is auto_now; the dashboard counts by it, so set it to the outcome time.
    Delivery.objects.filter(pk=delivery.pk).update(updated_at=finished_at)
    delivery.refresh_from_db()
    return delivery


def completed_event(user: User, *, years_ago: int = 1, finished_at: datetime | None = None) -> Event:
    finished_at = finished_at or timezone.now()
    event = past_event(user, status=EventStatus.COMPLETED, years_ago=years_ago, executed_at=finished_at)
    delivery_for(
        event,
        status=DeliveryStatus.DELIVERED,
        attempts=[(AttemptOutcome.DELIVERED, 200, "")],
        finished_at=finished_at,
    )
    return event


def failed_event(
    user: User, *, years_ago: int = 1, with_delivery: bool = True, finished_at: datetime | None = None
) -> Event:
    """A FAILED event; with a DEAD delivery, or none (too late to send)."""
    reason = "Gave up after 3 attempts; last: HTTP 503" if with_delivery else "Not sent: 50.0 h late"
    event = past_event(user, status=EventStatus.FAILED, years_ago=years_ago, failure_reason=reason)
    if with_delivery:
        delivery_for(
            event,
            status=DeliveryStatus.DEAD,
            attempts=[(AttemptOutcome.TRANSIENT_FAILURE, 503, "HTTP 503 Service Unavailable")] * 3,
            finished_at=finished_at,
        )
    return event


def dead_at(
    destination: Destination,
    *,
    status_code: int | None = 400,
    error: str = "Bad Request",
    finished_at: datetime | None = None,
    years_ago: int = 1,
) -> Delivery:
    """A new recipient's FAILED occurrence whose one delivery, to `destination`, ended DEAD."""
    event = past_event(
        UserFactory(),
        status=EventStatus.FAILED,
        years_ago=years_ago,
        failure_reason=f"{destination.name}: {error}",
    )
    outcome = (
        AttemptOutcome.PERMANENT_FAILURE
        if status_code and status_code < 500
        else AttemptOutcome.TRANSIENT_FAILURE
    )
    return delivery_for(
        event,
        status=DeliveryStatus.DEAD,
        attempts=[(outcome, status_code, error)],
        finished_at=finished_at,
        destination=destination,
    )


def delivered_at(destination: Destination, *, finished_at: datetime | None = None) -> Delivery:
    """A new recipient's COMPLETED occurrence delivered to `destination`, and its endpoint's last success."""
    finished_at = finished_at or timezone.now()
    event = past_event(UserFactory(), status=EventStatus.COMPLETED, executed_at=finished_at)
    delivery = delivery_for(
        event,
        status=DeliveryStatus.DELIVERED,
        attempts=[(AttemptOutcome.DELIVERED, 200, "")],
        finished_at=finished_at,
        destination=destination,
    )
    row = endpoint_for_destination(destination=destination)
    Endpoint.objects.filter(pk=row.pk).update(last_success_at=finished_at)
    return delivery


def endpoint(
    url: str,
    *,
    state: str = EndpointState.HEALTHY,
    since: timedelta = timedelta(minutes=12),
    paused_by: str = "ops-carol",
    last_error: str = "",
) -> Endpoint:
    """An endpoint row as the workers (FAILING) or an operator (PAUSED) would have left it, `since` ago."""
    now = timezone.now()
    fields: dict = {**endpoint_columns(url), "state": state, "last_error": last_error}
    if state == EndpointState.FAILING:
        fields.update(
            consecutive_failures=7,
            failing_since=now - since,
            last_failure_at=now - timedelta(seconds=20),
            next_probe_at=now + timedelta(seconds=40),
            probe_interval=timedelta(seconds=60),
            last_error=last_error or "HTTP 503 Service Unavailable",
        )
    elif state == EndpointState.PAUSED:
        fields.update(paused_by=paused_by, paused_at=now - since)
    made, _ = Endpoint.objects.update_or_create(key=fields.pop("key"), defaults=fields)
    made.url = url  # not a column (the URL is kept encrypted): the tests' name for it
    return made


def waiting_for(user: User, url: str, *, status: str = DeliveryStatus.QUEUED) -> Delivery:
    """A delivery to `url` that has not finished: QUEUED, or SENDING under a worker's lease."""
    delivery = delivery_for(past_event(user, status=EventStatus.PROCESSING), status=DeliveryStatus.QUEUED)
    fields: dict = {"endpoint_key": key_of(url)}
    if status == DeliveryStatus.SENDING:
        fields.update(
            status=status, locked_by="worker-7:311:beef", locked_until=timezone.now() + timedelta(seconds=30)
        )
    Delivery.objects.filter(pk=delivery.pk).update(**fields)
    delivery.refresh_from_db()
    return delivery


def heartbeat(
    *,
    kind: str = ProcessKind.WORKER,
    seen_ago: timedelta = timedelta(seconds=2),
    stopped: bool = False,
    host: str = "app-1",
    processed: int = 0,
    succeeded: int = 0,
    failed: int = 0,
    zone_data: str = "",
) -> ProcessHeartbeat:
    now = timezone.now()
    pid = next(_pids)
    return ProcessHeartbeat.objects.create(
        kind=kind,
        name=f"{host}:{pid}:{pid:x}",
        host=host,
        pid=pid,
        started_at=now - seen_ago - timedelta(hours=3),
        last_seen_at=now - seen_ago,
        stopped_at=now - seen_ago if stopped else None,
        processed=processed,
        succeeded=succeeded,
        failed=failed,
        zone_data=zone_data,
    )


DEMO_ZONES = [
    "America/Los_Angeles",
    "America/New_York",
    "America/Sao_Paulo",
    "Europe/London",
    "Europe/Berlin",
    "Africa/Lagos",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Singapore",
    "Asia/Tokyo",
    "Australia/Sydney",
    "Pacific/Auckland",
]


def populate_demo(*, recipients: int = 48) -> dict:
    """A realistic console: recipients across zones, birthdays in the next day or two,
    a year of sent and failed greetings, a small backlog and a few processes.

    Returns the notable rows (a FAILED event to resend, ...).
    """
    from users.tests.factories import UserFactory

    now = timezone.now()
    today = now.date()
    users = []
    for index in range(recipients):
        # Birthdays today, tomorrow or the day after, so the next 24 hours fill up.
        day = today + timedelta(days=index % 3)
        birth_year = 1962 + (index * 7) % 40
        try:
            born = day.replace(year=birth_year)
        except ValueError:  # Feb 29 in a non-leap year
            born = day.replace(year=birth_year, day=28)
        # As if created long ago: one created now, after today's send time, would be caught up (due now).
        with override_settings(EVENT_CATCH_UP_WINDOW=timedelta(0)):
            users.append(UserFactory(timezone=DEMO_ZONES[index % len(DEMO_ZONES)], date_of_birth=born))
    completed = []
    for offset, user in enumerate(users[:24]):
        completed.append(completed_event(user, finished_at=now - timedelta(minutes=7 + offset * 55)))
    failed = [
        failed_event(user, finished_at=now - timedelta(minutes=25 + offset * 140))
        for offset, user in enumerate(users[24:28])
    ]
    failed.append(failed_event(users[28], with_delivery=False))
    # A small backlog: three greetings due minutes ago that no scheduler has claimed yet.
    overdue = []
    # Recipients whose birthday is today (index % 3 == 0) and have no history rows.
    for minutes, user in zip((3, 6, 14), (users[30], users[33], users[36]), strict=True):
        event = user.events.get(status=EventStatus.PENDING)
        due = (now - timedelta(minutes=minutes)).replace(second=0, microsecond=0)
        Event.objects.filter(pk=event.pk).update(
            occurrence_date=due.astimezone(load_timezone(user.timezone)).date(),
            target_timestamp_utc=due,
            target_timestamp_local=due.astimezone(load_timezone(user.timezone)).isoformat(),
        )
        overdue.append(event)
    heartbeat(kind=ProcessKind.SCHEDULER, host="sched-1", processed=1284, succeeded=1284)
    heartbeat(kind=ProcessKind.WORKER, host="worker-1", processed=1140, succeeded=1127, failed=13)
    heartbeat(kind=ProcessKind.WORKER, host="worker-2", processed=1098, succeeded=1090, failed=8)
    heartbeat(
        kind=ProcessKind.WORKER,
        host="worker-3",
        seen_ago=timedelta(minutes=4),
        processed=311,
        succeeded=309,
        failed=2,
    )
    heartbeat(
        kind=ProcessKind.SCHEDULER, host="sched-0", seen_ago=timedelta(hours=2), stopped=True, processed=806
    )
    return {"users": users, "completed": completed, "failed": failed, "overdue": overdue}
