"""Digests: one message per (destination, period) naming its dates' people, queued by the scheduler.

A destination with a digest time gets no delivery per occurrence from the
claim (delivery.dispatch.claim leaves it out of the router); instead, when
its `next_digest_at` has come, the scheduler builds its digest here:

1. Lock the due destinations, `FOR NO KEY UPDATE SKIP LOCKED` (another
   scheduler takes others; the claim's `FOR KEY SHARE` on destinations is not
   in the way of either), through the partial index on `next_digest_at`: one
   index probe when none is due.
2. Read the occurrences of the dates it names (delivery.rules.digest_calendar.dates_named:
   the day, or N days ahead, or a week) of the types it subscribes to, whose
   recipient is in its audience and is not paused, nor their type: each one
   line (the handler's `digest_line`, in the destination's language).
3. None: nothing is sent that day. Else insert the Digest
   (`ON CONFLICT DO NOTHING`: its (destination, date) and (destination,
   period) are unique, and the database's uniqueness is what makes it once,
   whatever runs twice) and, only if it was inserted, its one Delivery,
   rendered in the destination's kind.
4. Advance `next_digest_*` to the next date, in the same transaction.

A crash anywhere before the commit leaves nothing: the next turn builds it
again from the start. After the commit the Delivery goes through the outbox
like any other: leases, attempts, retries, the endpoint's health and pace,
resend and recover, under the digest's own key.

Rules (docs/design.md, "Digests and working days"):
- The body is rendered when the digest is built, from the recipients as they
  are then. Someone created or edited later that day is not in it (their
  other destinations still greet them); someone erased before it is built is
  not named; someone erased after is taken out of the stored lines and the
  body rendered again (digests_erase), whether it was sent yet or not.
- A digest due more than EVENT_MAX_LATENESS ago (the schedulers were down for
  days) is not sent, as an occurrence that late is not: the next date's is.
- A disabled destination's digest dates pass without a digest.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from delivery.destinations.audience import Audience
from delivery.destinations.mentions import digest_mentions
from delivery.dispatch.claim import queued_delivery_defaults
from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus, Destination, DestinationOptOut, Digest
from delivery.rules.digest_calendar import (
    dates_named,
    digest_body,
    digest_heading,
    digest_key,
    digest_period,
    line_day,
    next_digest,
)
from kinds import STANDARD
from runtime.ids import uuid7
from runtime.sql import execute
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.celebration import DEFAULT_VISIBILITY, Visibility, visibility_of
from scheduling.handlers import get_handler
from scheduling.models import CelebrationDefault, Event
from scheduling.pauses import PauseSpan
from scheduling.selectors import celebration_defaults, event_type_pauses
from users.models import CelebrationChoice

logger = logging.getLogger(__name__)

# Destinations built per transaction: a handful are ever due at one instant.
BUILD_BATCH = 20


@dataclass(frozen=True)
class DigestsBuilt:
    # Digests queued; dates that named nobody; dates skipped (too late, or the destination disabled).
    queued: int = 0
    empty: int = 0
    skipped: int = 0

    @property
    def handled(self) -> int:
        return self.queued + self.empty + self.skipped


# What became of a due digest date (_digest_build).
_QUEUED, _EMPTY, _SKIPPED, _BUILT_BEFORE = "queued", "empty", "skipped", "built before"


def digests_build_due(*, now: datetime, limit: int = BUILD_BATCH) -> DigestsBuilt:
    """Build and queue the digests due by `now`, up to `limit` destinations, in one transaction."""
    built: Counter[str] = Counter()
    with transaction.atomic():
        due = list(
            Destination.objects.select_for_update(skip_locked=True, no_key=True)
            .filter(next_digest_at__lte=now)
            .order_by("next_digest_at")[:limit]
        )
        if not due:
            return DigestsBuilt()
        type_pauses = event_type_pauses()
        for destination in due:
            built[_digest_build(destination=destination, now=now, type_pauses=type_pauses)] += 1
            _next_digest_advance(destination=destination, now=now)
    queued, empty = built[_QUEUED], built[_EMPTY]
    if queued:
        # After the commit, as the claim does: a worker woken now sees the rows.
        notify(WORKER_CHANNEL)
    if queued or empty:
        logger.info("Digests: %s queued, %s with nobody to name", queued, empty)
    return DigestsBuilt(queued=queued, empty=empty, skipped=built[_SKIPPED])


def _digest_build(*, destination: Destination, now: datetime, type_pauses: dict[str, PauseSpan]) -> str:
    """Build and queue the destination's digest of its next date, if it is to be sent: say what became of it."""
    assert destination.next_digest_date is not None and destination.next_digest_at is not None
    day = destination.next_digest_date
    late = now - destination.next_digest_at > settings.EVENT_MAX_LATENESS
    if late:
        logger.warning(
            "A digest more than EVENT_MAX_LATENESS late is not sent",
            extra={"destination": destination.name, "date": day.isoformat()},
        )
    if late or not destination.enabled:
        return _SKIPPED
    first, last = dates_named(
        day=day,
        weekend=destination.weekend,
        days_ahead=destination.digest_days_ahead,
        weekday=destination.digest_weekday,
    )
    entries = digest_entries(
        destination=destination, first=first, last=last, day=day, type_pauses=type_pauses
    )
    if not entries:
        return _EMPTY
    queued = _digest_queue(destination=destination, day=day, first=first, last=last, entries=entries, now=now)
    return _QUEUED if queued else _BUILT_BEFORE


def _next_digest_advance(*, destination: Destination, now: datetime) -> None:
    """Move the destination's next digest date and instant on past the one due."""
    assert destination.next_digest_date is not None and destination.next_digest_at is not None
    assert destination.digest_time is not None  # destination_digest_complete
    # From the later of the date's instant and the lateness window, so schedulers down for
    # a week do not walk through every day they missed one turn at a time.
    after = max(destination.next_digest_at, now - settings.EVENT_MAX_LATENESS)
    destination.next_digest_date, destination.next_digest_at = next_digest(
        at=destination.digest_time,
        timezone_name=destination.digest_timezone,
        weekend=destination.weekend,
        after=after,
        after_date=destination.next_digest_date,
        weekday=destination.digest_weekday,
    )
    # Not save(): that would bump nothing it should, and rewrite every column.
    Destination.objects.filter(pk=destination.pk).update(
        next_digest_date=destination.next_digest_date, next_digest_at=destination.next_digest_at
    )


def digest_entries(
    *, destination: Destination, first: date, last: date, day: date, type_pauses: dict[str, PauseSpan]
) -> list[dict[str, Any]]:
    """The occurrences from `first` to `last` the destination's digest sent on `day` names, in date then name
    order: the one place that says who a digest names.

    Read from the events: each recipient has one PENDING event per type for its next occurrence,
    which for a yearly type is the one on any date up to a year ahead, so the 36 days a digest
    reaches at most (30 ahead and a week) are always among them.
    """
    entries = []
    for event in _named_events(destination=destination, first=first, last=last):
        user = event.user
        # Held back as the claim will hold them (scheduling.pauses), judged at the occurrence's own
        # send time: one paused now is not named, even a week ahead (a pause lasts until resumed,
        # so the day would hold them back too, and an announcement names whom the day will greet);
        # one resumed is. A pause taken after the digest went cannot take them out of it.
        if PauseSpan(user.paused_at, user.resumed_at).holds(event.target_timestamp_utc):
            continue
        pause = type_pauses.get(event.event_type)
        if pause is not None and pause.holds(event.target_timestamp_utc):
            continue
        line = get_handler(event.event_type).digest_line(
            user=user, occurrence_date=event.occurrence_date, language=destination.digest_language
        )
        line += line_day(
            occurrence_date=event.occurrence_date,
            day=day,
            first=first,
            last=last,
            weekly=bool(destination.digest_weekday),
            language=destination.digest_language,
        )
        entries.append(
            {
                "event_id": str(event.id),
                "event_type": event.event_type,
                "user_id": str(user.id),
                "occurrence_date": event.occurrence_date.isoformat(),
                "idempotency_key": event.idempotency_key,
                "line": line,
            }
        )
    return entries


def _named_events(*, destination: Destination, first: date, last: date) -> QuerySet[Event]:
    """The events of `first` to `last` a digest of the destination may name, their people locked, in name order.

    Only the people celebrated publicly (scheduling.celebration): a digest is a channel's. Their
    rows locked, so a change of their choices being written now waits for this digest to be
    queued and then takes them out of it (delivery.dispatch.withdraw), and one committed
    before is read here. In the order of the names, then ids: two schedulers building two
    destinations' digests lock shared people in the same order.
    """
    events = Event.objects.filter(occurrence_date__gte=first, occurrence_date__lte=last).filter(
        Audience.of(destination).recipient_filter(prefix="user__")
    )
    if destination.event_types:
        events = events.filter(event_type__in=destination.event_types)
    return (
        events.annotate(
            visibility_in_force=Coalesce(
                Subquery(
                    CelebrationChoice.objects.filter(
                        user_id=OuterRef("user_id"), event_type=OuterRef("event_type")
                    ).values("visibility")[:1]
                ),
                Subquery(
                    CelebrationDefault.objects.filter(event_type=OuterRef("event_type")).values("visibility")[
                        :1
                    ]
                ),
                Value(DEFAULT_VISIBILITY.value),
            )
        )
        .filter(visibility_in_force=Visibility.PUBLIC)
        # Nor anyone who opted out of this destination (delivery.actions.optouts).
        .exclude(
            Exists(DestinationOptOut.objects.filter(user_id=OuterRef("user_id"), destination=destination))
        )
        .select_for_update(of=("user",), no_key=True)
        .select_related("user")
        .order_by("occurrence_date", "user__last_name", "user__first_name", "user_id", "event_type")
    )


def _digest_queue(
    *,
    destination: Destination,
    day: date,
    first: date,
    last: date,
    entries: list[dict[str, Any]],
    now: datetime,
) -> bool:
    """Insert the destination's digest of `day`'s period and its delivery; False if it exists (built before:
    nothing more)."""
    period = digest_period(
        day=day, weekday=destination.digest_weekday, days_ahead=destination.digest_days_ahead
    )
    digest = Digest(
        destination=destination,
        local_date=day,
        first_date=first,
        last_date=last,
        period=period,
        idempotency_key=digest_key(destination_id=destination.pk, period=period),
        heading=digest_heading(
            day=day,
            first=first,
            last=last,
            days_ahead=destination.digest_days_ahead,
            weekly=bool(destination.digest_weekday),
            language=destination.digest_language,
        ),
        language=destination.digest_language,
        entries=entries,
    )
    if not _digest_insert(digest=digest, now=now):
        return False
    Delivery.objects.create(
        id=uuid7(),
        event=None,
        digest=digest,
        destination=destination,
        endpoint_key=destination.url_key,
        idempotency_key=digest.idempotency_key,
        payload=digest_body(
            digest=digest,
            format=destination.format,
            mentions=digest_mentions(destination=destination, user_ids=_named(entries)),
        ),
        **queued_delivery_defaults(now=now),
    )
    return True


def _digest_insert(*, digest: Digest, now: datetime) -> bool:
    """Insert the digest, setting its id; False if its destination has one of that date or period already."""
    # No conflict target: the (destination, date), (destination, period) and key constraints
    # each refuse a second digest.
    inserted = execute(
        f"INSERT INTO {Digest._meta.db_table} "
        "(destination_id, local_date, first_date, last_date, period, idempotency_key, heading, language, entries, "
        "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s) "
        "ON CONFLICT DO NOTHING RETURNING id",
        [
            digest.destination_id,
            digest.local_date,
            digest.first_date,
            digest.last_date,
            digest.period,
            digest.idempotency_key,
            digest.heading,
            digest.language,
            json.dumps(digest.entries),
            now,
        ],
    )
    if not inserted:
        return False
    digest.id = inserted[0][0]
    return True


def _named(entries: list[dict[str, Any]]) -> set[str]:
    """The ids of the people a digest's entries name."""
    return {entry["user_id"] for entry in entries if entry.get("user_id")}


def digests_erase(*, user_id: uuid.UUID) -> int:
    """Take the recipient out of every digest naming them and render each again; return how many changed.

    Called inside the recipient's erase (delivery.erasure), whose
    rules it follows: the digest's delivery row is locked first (a worker
    recording at that moment finishes before); one still to send goes without
    them (none at all if they were its only name); one sent keeps its record
    and attempts, its body rendered again without them and the answers'
    excerpts dropped. A request already on its way named them.
    """
    changed = 0
    wanted = str(user_id)
    digests = Digest.objects.filter(entries__contains=[{"user_id": wanted}]).order_by("id")
    for digest in digests.select_for_update(of=("self",)):
        delivery = Delivery.objects.select_for_update().filter(digest=digest).first()
        changed += 1
        entries = [entry for entry in digest.entries if entry.get("user_id") != wanted]
        if delivery is None:
            digest.entries = entries
            digest.save(update_fields=["entries"])
            continue
        DeliveryAttempt.objects.filter(delivery=delivery).update(response_excerpt="")
        # A success recorded on the delivery keeps its answer there (delivery.states.successes).
        delivery.delivered_response = ""
        digest_rerender(delivery=delivery, digest=digest, entries=entries)
    return changed


def digest_rerender(*, delivery: Delivery, digest: Digest, entries: list[dict[str, Any]]) -> None:
    """Store the digest's new `entries` and render its delivery again from them (its rows locked by the caller).

    Nobody left to name and not yet sent: the delivery goes, nothing is sent (a worker recording
    later finds no row under its lease).
    """
    digest.entries = entries
    digest.save(update_fields=["entries"])
    if not entries and delivery.status in (DeliveryStatus.QUEUED, DeliveryStatus.SENDING):
        DeliveryAttempt.objects.filter(delivery=delivery).update(delivery=None, error="", response_excerpt="")
        delivery.delete()
        return
    delivery.payload = digest_body(
        digest=digest,
        format=delivery.destination.format if delivery.destination else STANDARD.name,
        # Those named still, as they are now (one erased or withdrawn is no longer among them).
        mentions=digest_mentions(destination=delivery.destination, user_ids=_named(entries)),
    )
    delivery.save(update_fields=["payload", "delivered_response", "updated_at"])


def digest_entries_without(
    *, entries: list[dict[str, Any]], event_types: Collection[str]
) -> list[dict[str, Any]]:
    """The entries of `event_types` whose person is no longer celebrated publicly left out (scheduling.celebration)."""
    named = {entry["user_id"] for entry in entries if entry.get("event_type") in event_types}
    if not named:
        return entries
    choices = {
        (str(user_id), event_type): visibility
        for user_id, event_type, visibility in CelebrationChoice.objects.filter(
            user_id__in=named, event_type__in=list(event_types)
        ).values_list("user_id", "event_type", "visibility")
    }
    defaults = celebration_defaults()
    return [
        entry
        for entry in entries
        if entry.get("event_type") not in event_types
        or visibility_of(
            choices.get((entry["user_id"], entry["event_type"])), default=defaults.get(entry["event_type"])
        )
        == Visibility.PUBLIC
    ]
