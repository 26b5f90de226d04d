"""A digest's calendar: when a destination's next digest goes, which dates it names, and its period.

Pure functions of (the destination's digest time, its IANA zone, its weekend
rule, its days ahead and weekday, an instant): the services set and advance
`Destination.next_digest_*` with them, the console and the API show what they say.

- ON_THE_DAY: a digest every day, naming that date's people.
- FRIDAY_BEFORE: none on Saturday or Sunday; Friday's names Friday, Saturday and Sunday.
- MONDAY_AFTER: none on Saturday or Sunday; Monday's names Saturday, Sunday and Monday.
- days_ahead N: the dates named move N days on (Tuesday 1's digest of a week ahead names Tuesday 8).
- weekday W (weekly): a digest on W only, naming the seven days from its date (plus N): its
  period is the ISO week of its date, so a week gets one whatever the weekday is changed to.

A digest is once per (destination, period): the period is its date for a daily digest, its
ISO week for a weekly one (Digest.period, unique per destination), and its key is made
from it.

A local time the zone skips (a DST gap) moves forward by the gap, one it
repeats takes its first instant (fold=0), as every send time does
(scheduling.times.wall_time_instant).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from typing import Any

from delivery.models import WEEKDAYS, Destination, Digest, DigestLanguage, Weekend
from kinds import Mention, kind_for
from scheduling.times import load_timezone, wall_time_instant

SATURDAY, SUNDAY = 5, 6

# The digest's key: "digest-" and the hash's first 25 hex digits (100 bits), 32 characters
# as every idempotency key is (Delivery.idempotency_key).
KEY_PREFIX = "digest-"


def digest_period(*, day: date, weekday: str | None, days_ahead: int = 0) -> str:
    """The period the digest sent on `day` is once for: its date (and days ahead, if any) for a daily one,
    its ISO week for a weekly one ("2026-W50")."""
    if weekday:
        year, week, _ = day.isocalendar()
        return f"{year}-W{week:02d}"
    return day.isoformat() if not days_ahead else f"{day.isoformat()}+{days_ahead}"


def digest_key(*, destination_id: int, period: str) -> str:
    """The digest's idempotency key: the same for (destination, period) on every attempt, resend and recovery.

    A daily digest of the day itself keeps the key it always had (its period is its date)."""
    digest = hashlib.sha256(f"digest:{destination_id}:{period}".encode()).hexdigest()
    return KEY_PREFIX + digest[: 32 - len(KEY_PREFIX)]


def sends_on(*, day: date, weekend: str, weekday: str | None = None) -> bool:
    """Whether a digest goes on `day`: a weekly one on its weekday; a daily one every day on the day,
    never on a weekend day otherwise."""
    if weekday:
        return day.weekday() == WEEKDAYS.index(weekday)
    return weekend == Weekend.ON_THE_DAY or day.weekday() not in (SATURDAY, SUNDAY)


def dates_named(
    *, day: date, weekend: str, days_ahead: int = 0, weekday: str | None = None
) -> tuple[date, date]:
    """The first and last occurrence dates the digest sent on `day` names."""
    ahead = timedelta(days=days_ahead)
    if weekday:
        return day + ahead, day + ahead + timedelta(days=6)
    if weekend == Weekend.FRIDAY_BEFORE and day.weekday() == 4:
        return day + ahead, day + ahead + timedelta(days=2)
    if weekend == Weekend.MONDAY_AFTER and day.weekday() == 0:
        return day + ahead - timedelta(days=2), day + ahead
    return day + ahead, day + ahead


def _period_start(day: date, weekday: str | None) -> date:
    """The first date of the period `day` is in: itself, or its ISO week's Monday for a weekly digest."""
    return day - timedelta(days=day.weekday()) if weekday else day


def digest_date_naming(
    *, occurrence_date: date, weekend: str, days_ahead: int = 0, weekday: str | None = None
) -> date:
    """The date whose digest names an occurrence of `occurrence_date` (dates_named read backwards)."""
    # A weekend rule moves a date at most two days either way, a weekly digest names the six after its own.
    named = occurrence_date - timedelta(days=days_ahead)
    for offset in (0, 1, 2, -1, -2, -3, -4, -5, -6):
        day = named + timedelta(days=offset)
        first, last = dates_named(day=day, weekend=weekend, days_ahead=days_ahead, weekday=weekday)
        if sends_on(day=day, weekend=weekend, weekday=weekday) and first <= occurrence_date <= last:
            return day
    raise AssertionError("every date is named by a digest within a week")  # unreachable by dates_named


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
                weekday=destination.digest_weekday,
            )
        )
    return dates


def next_digest(
    *,
    at: time,
    timezone_name: str,
    weekend: str,
    after: datetime,
    after_date: date | None = None,
    weekday: str | None = None,
) -> tuple[date, datetime]:
    """The first digest (local date, UTC instant) due strictly after `after`, in a period after `after_date`'s
    (the date just built: its period's successor comes next, whatever the clock says)."""
    local_today = after.astimezone(load_timezone(timezone_name)).date()
    if after_date is not None and after_date >= local_today:
        local_today = after_date + timedelta(days=1)
    built = _period_start(after_date, weekday) if after_date is not None else None
    # Two weeks and a day cover any rule from any starting day: a weekly digest whose week
    # was built goes on its weekday of the next week.
    for offset in range(-1, 15):
        day = local_today + timedelta(days=offset)
        if built is not None and (day <= after_date or _period_start(day, weekday) <= built):  # type: ignore[operator]
            continue
        if not sends_on(day=day, weekend=weekend, weekday=weekday):
            continue
        instant, _ = wall_time_instant(wall=datetime.combine(day, at), timezone_name=timezone_name)
        if instant > after:
            return day, instant
    raise AssertionError(
        "a digest goes at least once a week"
    )  # unreachable: 16 days hold two of each weekday


def digest_schedule(*, destination: Destination, now: datetime, last_built: date | None = None) -> None:
    """Set the destination's next digest from its settings (none without a digest time); the caller saves.

    The first due strictly after `now`, in a period after `last_built`'s (the latest date whose
    digest was built: delivery.destinations.selectors.destination_last_digest_date). A time
    set after today's has passed starts tomorrow; a date (a week, for a weekly digest) whose
    digest was already built is never built again (its Digest row is unique), so moving the
    time later the same day, or the weekday later the same week, names the next one, the one
    that will be sent, not the one already sent.
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
        weekday=destination.digest_weekday,
    )


def next_digest_local(*, destination: Destination) -> datetime | None:
    """When the destination's next digest is due, in its own zone (the console and the API show it so, with
    UTC beside); None without a digest."""
    if destination.next_digest_at is None or not destination.digest_timezone:
        return None
    return destination.next_digest_at.astimezone(load_timezone(destination.digest_timezone))


# The words of a digest's heading and of a line's day, per language (Destination.digest_language):
# a channel's digest is in its destination's language, whatever its people's. Tables, not the
# locale's strftime: the process's locale is the host's, and German puts the day before the month.
_WEEKDAY_NAMES = {
    DigestLanguage.EN: ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    DigestLanguage.DE: ("Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"),
}
_MONTH_NAMES = {
    DigestLanguage.EN: (
        "January", "February", "March", "April", "May", "June",
        "July", "August", "September", "October", "November", "December",
    ),
    DigestLanguage.DE: (
        "Januar", "Februar", "März", "April", "Mai", "Juni",
        "Juli", "August", "September", "Oktober", "November", "Dezember",
    ),
}  # fmt: skip
# When the dates named are, from the day it is sent: {0: today, 1: tomorrow, 7: in a week, n: in n days}.
_WHEN = {
    DigestLanguage.EN: {0: "Today", 1: "Tomorrow", 7: "In a week", 14: "In two weeks", None: "In {n} days"},
    DigestLanguage.DE: {
        0: "Heute",
        1: "Morgen",
        7: "In einer Woche",
        14: "In zwei Wochen",
        None: "In {n} Tagen",
    },
}
_WEEK = {DigestLanguage.EN: "The coming seven days", DigestLanguage.DE: "Die kommenden sieben Tage"}


def weekday_name(day: date, language: str) -> str:
    return _WEEKDAY_NAMES[_language(language)][day.weekday()]


def _language(language: str) -> DigestLanguage:
    return DigestLanguage(language) if language in DigestLanguage.values else DigestLanguage.EN


def _date_words(day: date, language: str) -> str:
    """Tuesday 8 December; Dienstag, 8. Dezember."""
    lang = _language(language)
    month = _MONTH_NAMES[lang][day.month - 1]
    if lang == DigestLanguage.DE:
        return f"{weekday_name(day, lang)}, {day.day}. {month}"
    return f"{weekday_name(day, lang)} {day.day} {month}"


def digest_heading(
    *,
    day: date,
    first: date,
    last: date,
    days_ahead: int = 0,
    weekly: bool = False,
    language: str = DigestLanguage.EN,
) -> str:
    """The heading of the digest sent on `day` naming `first` to `last`, in `language`:
    "Today, Tuesday 1 December:", "In a week, Tuesday 8 December:", "Friday 4 December to Sunday 6
    December:" (a weekend's, on the day), "The coming seven days, Tuesday 1 December to Monday 7 December:"."""
    lang = _language(language)
    span = _date_words(first, lang)
    if first != last:
        span += f" {'bis' if lang == DigestLanguage.DE else 'to'} {_date_words(last, lang)}"
    if weekly:
        return f"{_WEEK[lang]}, {span}:"
    if first != last and not days_ahead:
        return f"{span}:"
    return f"{_WHEN[lang].get(days_ahead, _WHEN[lang][None]).format(n=days_ahead)}, {span}:"


def line_day(
    *, occurrence_date: date, day: date, first: date, last: date, weekly: bool, language: str
) -> str:
    """What a digest's line says of its date (" (Saturday)"): a digest naming several dates says it on
    each line, but a daily digest's lines of its own day."""
    if first == last or (occurrence_date == day and not weekly):
        return ""
    return f" ({weekday_name(occurrence_date, language)})"


def digest_payload(*, digest: Digest) -> dict[str, Any]:
    """The standard body of a digest: its key, its dates, a heading and each occurrence with its own key."""
    return {
        "type": "digest",
        "digest_key": digest.idempotency_key,
        "date": digest.local_date.isoformat(),
        "first_date": digest.first_date.isoformat(),
        "last_date": digest.last_date.isoformat(),
        # Stored when it was built (its words depend on the settings then); older digests have none.
        "heading": digest.heading
        or digest_heading(day=digest.local_date, first=digest.first_date, last=digest.last_date),
        "language": digest.language,
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
