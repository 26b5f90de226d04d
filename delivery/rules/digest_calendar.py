"""A daily digest's calendar: when a destination's next digest goes, and which dates it names.

Pure functions of (the destination's digest time, its IANA zone, its weekend
rule, an instant): the services set and advance `Destination.next_digest_*`
with them, the console and the API show what they say.

- ON_THE_DAY: a digest every day, naming that date's people.
- FRIDAY_BEFORE: none on Saturday or Sunday; Friday's names Friday, Saturday and Sunday.
- MONDAY_AFTER: none on Saturday or Sunday; Monday's names Saturday, Sunday and Monday.

A local time the zone skips (a DST gap) moves forward by the gap, one it
repeats takes its first instant (fold=0), as every send time does
(scheduling.times.wall_time_instant).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from typing import Any

from delivery.models import Destination, Digest, Weekend
from kinds import Mention, kind_for
from scheduling.times import load_timezone, wall_time_instant

SATURDAY, SUNDAY = 5, 6

# The digest's key: "digest-" and the hash's first 25 hex digits (100 bits), 32 characters
# as every idempotency key is (Delivery.idempotency_key).
KEY_PREFIX = "digest-"


def digest_key(*, destination_id: int, local_date: date) -> str:
    """The digest's idempotency key: the same for (destination, date) on every attempt, resend and recovery."""
    digest = hashlib.sha256(f"digest:{destination_id}:{local_date.isoformat()}".encode()).hexdigest()
    return KEY_PREFIX + digest[: 32 - len(KEY_PREFIX)]


def sends_on(*, day: date, weekend: str) -> bool:
    """Whether a digest goes on `day`: every day on the day; never on a weekend day otherwise."""
    return weekend == Weekend.ON_THE_DAY or day.weekday() not in (SATURDAY, SUNDAY)


def dates_named(*, day: date, weekend: str) -> tuple[date, date]:
    """The first and last occurrence dates the digest sent on `day` names."""
    if weekend == Weekend.FRIDAY_BEFORE and day.weekday() == 4:
        return day, day + timedelta(days=2)
    if weekend == Weekend.MONDAY_AFTER and day.weekday() == 0:
        return day - timedelta(days=2), day
    return day, day


def digest_date_naming(*, occurrence_date: date, weekend: str) -> date:
    """The date whose digest names an occurrence of `occurrence_date` (dates_named read backwards)."""
    # A weekend rule moves a date at most two days either way.
    for offset in (0, 1, 2, -1, -2):
        day = occurrence_date + timedelta(days=offset)
        first, last = dates_named(day=day, weekend=weekend)
        if sends_on(day=day, weekend=weekend) and first <= occurrence_date <= last:
            return day
    raise AssertionError("every date is named by a digest within two days")  # unreachable by dates_named


def digest_dates(*, destination: Destination, count: int) -> list[tuple[date, datetime]]:
    """The destination's next `count` digests (local date, UTC instant), from its next one; none without a digest."""
    if destination.next_digest_date is None or destination.next_digest_at is None:
        return []
    assert destination.digest_time is not None  # destination_digest_complete
    dates = [(destination.next_digest_date, destination.next_digest_at)]
    while len(dates) < count:
        dates.append(
            next_digest(
                at=destination.digest_time,
                timezone_name=destination.digest_timezone,
                weekend=destination.weekend,
                after=dates[-1][1],
                after_date=dates[-1][0],
            )
        )
    return dates


def next_digest(
    *, at: time, timezone_name: str, weekend: str, after: datetime, after_date: date | None = None
) -> tuple[date, datetime]:
    """The first digest (local date, UTC instant) due strictly after `after`, and on a date after `after_date`
    (the date just built: its successor comes next, whatever the clock says)."""
    local_today = after.astimezone(load_timezone(timezone_name)).date()
    if after_date is not None and after_date >= local_today:
        local_today = after_date + timedelta(days=1)
    # A week and a day covers any weekend rule from any starting day.
    for offset in range(-1, 9):
        day = local_today + timedelta(days=offset)
        if (after_date is not None and day <= after_date) or not sends_on(day=day, weekend=weekend):
            continue
        instant, _ = wall_time_instant(wall=datetime.combine(day, at), timezone_name=timezone_name)
        if instant > after:
            return day, instant
    raise AssertionError("a digest goes at least on every weekday")  # unreachable: 5 weekdays in 10 days


def digest_schedule(*, destination: Destination, now: datetime, last_built: date | None = None) -> None:
    """Set the destination's next digest from its settings (none without a digest time); the caller saves.

    The first due strictly after `now`, on a date after `last_built` (the latest date whose
    digest was built: delivery.destinations.selectors.destination_last_digest_date). A time
    set after today's has passed starts tomorrow; a date whose digest was already built is
    never built again (its Digest row is unique), so moving the time later the same day names
    the next date, the one that will be sent, not the one already sent.
    """
    if destination.digest_time is None:
        destination.next_digest_date = destination.next_digest_at = None
        return
    destination.next_digest_date, destination.next_digest_at = next_digest(
        at=destination.digest_time,
        timezone_name=destination.digest_timezone,
        weekend=destination.weekend,
        after=now,
        after_date=last_built,
    )


def next_digest_local(*, destination: Destination) -> datetime | None:
    """When the destination's next digest is due, in its own zone (the console and the API show it so, with
    UTC beside); None without a digest."""
    if destination.next_digest_at is None or not destination.digest_timezone:
        return None
    return destination.next_digest_at.astimezone(load_timezone(destination.digest_timezone))


def _heading(*, day: date, first: date, last: date) -> str:
    if first == last:
        return f"Today, {day:%A} {day.day} {day:%B}:"
    return f"{first:%A} {first.day} {first:%B} to {last:%A} {last.day} {last:%B}:"


def digest_payload(*, digest: Digest) -> dict[str, Any]:
    """The standard body of a digest: its key, its dates, a heading and each occurrence with its own key."""
    return {
        "type": "digest",
        "digest_key": digest.idempotency_key,
        "date": digest.local_date.isoformat(),
        "first_date": digest.first_date.isoformat(),
        "last_date": digest.last_date.isoformat(),
        "heading": _heading(day=digest.local_date, first=digest.first_date, last=digest.last_date),
        "occurrences": digest.entries,
    }


def digest_body(
    *,
    digest: Digest,
    format: str,
    mentions: Mapping[str, Mention] | None = None,  # noqa: A002
) -> dict[str, Any]:
    """What a digest's delivery sends, in the kind `format`, mentioning the people of `mentions` (by their id)
    it names (delivery.destinations.mentions.digest_mentions decides whom)."""
    return kind_for(format).digest_body(digest_payload(digest=digest), mentions=mentions)
