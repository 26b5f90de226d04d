"""Local times of day and IANA time zones: the one HH:MM rule, the one time zone cleaner, the one door to
zoneinfo, and a wall time's instant.

Every place that takes a time of day (a recipient's send time, a destination's
digest time, EVENT_SEND_TIME) reads it by `time_of_day`, and every place that
takes a zone's name checks it by `clean_timezone`: the API, the console, the
import and the services refuse and accept the same.
"""

import re
from datetime import UTC, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, available_timezones

from django.core.exceptions import ValidationError

from scheduling.zonedata import zone_cache

# A local time of day as the API, the console and the import take it: two-digit hours and minutes,
# 00:00 to 23:59 (not "9:30", "09:30:00" or "9am"): what a client sends is what it reads back.
TIME_OF_DAY_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
_TIME_OF_DAY = re.compile(TIME_OF_DAY_PATTERN)
_UTC_OFFSET = re.compile(r"^(UTC|GMT)?\s*[+-]\d", re.IGNORECASE)
# An offset read whole, to suggest zones at it: +5, +05, +0530, +05:30, UTC+5:45.
_OFFSET_PARTS = re.compile(r"^(?:UTC|GMT)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)
# How many zones an offset's message suggests.
SUGGESTED_ZONES = 3


def time_of_day(value: object) -> time | None:
    """`value` as a time of day if it is one written HH:MM by TIME_OF_DAY_PATTERN; None if it is not."""
    if not isinstance(value, str) or not _TIME_OF_DAY.fullmatch(value):
        return None
    return time(int(value[:2]), int(value[3:]))


@zone_cache
@lru_cache(maxsize=1)
def _known_timezone_names() -> frozenset[str]:
    # available_timezones() walks the tz database on disk; read it once per
    # version of the database (a new one can name new zones).
    return frozenset(available_timezones())


def clean_timezone(value: object) -> str:
    """Accept only IANA names that zoneinfo can load (not offsets like +05:00)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("Time zone must be an IANA name such as America/New_York.")
    name = value.strip()
    if name not in _known_timezone_names():
        if _UTC_OFFSET.match(name):
            zones = zones_at_offset(name)
            example = f"one at {name} now, such as {', '.join(zones)}" if zones else "such as Europe/Berlin"
            raise ValidationError(
                f"'{name}' is a UTC offset, not a time zone: offsets do not follow "
                f"daylight saving time. Use an IANA name, {example}."
            )
        raise ValidationError(f"'{name}' is not a known IANA time zone (for example Europe/London).")
    return name


def zones_at_offset(offset: str, *, now: datetime | None = None) -> list[str]:
    """A few IANA zones (Area/City) whose UTC offset is `offset` (as +05:00 or UTC+5 is written) at `now`;
    [] if it is not one. Asia/Kathmandu is +05:45, so +05:00 must not suggest it."""
    match = _OFFSET_PARTS.match(offset.strip())
    if match is None:
        return []
    sign, hours, minutes = match.group(1), int(match.group(2)), int(match.group(3) or 0)
    wanted = (-1 if sign == "-" else 1) * timedelta(hours=hours, minutes=minutes)
    at = now or datetime.now(UTC)
    zones = sorted(
        name
        for name in _known_timezone_names()
        if "/" in name
        and not name.startswith(("Antarctica/", "Etc/", "SystemV/", "US/", "posix/", "right/"))
        and at.astimezone(load_timezone(name)).utcoffset() == wanted
    )
    return zones[:SUGGESTED_ZONES]


@zone_cache
@lru_cache(maxsize=1024)
def load_timezone(name: str) -> ZoneInfo:
    """Return the ZoneInfo for an already validated IANA name (cached)."""
    return ZoneInfo(name)


def wall_time_instant(*, wall: datetime, timezone_name: str) -> tuple[datetime, datetime]:
    """A naive local wall time in a zone as (the UTC instant, the local time with its offset), by the rules now loaded.

    In a DST gap the wall time moves forward by the gap: with fold=0 zoneinfo
    applies the offset in force before the transition, so 02:30 on a
    spring-forward night becomes 03:30. In an overlap it takes the first, which
    is also fold=0.
    """
    zone = load_timezone(timezone_name)
    target_utc = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    return target_utc, target_utc.astimezone(zone)
