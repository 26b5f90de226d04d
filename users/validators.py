"""The rules for a recipient's fields, shared by the API, the admin and the importer."""

import re
from datetime import date, datetime, timedelta
from functools import lru_cache
from zoneinfo import available_timezones

from django.core.exceptions import ValidationError
from django.utils import timezone as django_timezone

from scheduling.timezones import load_timezone

NAME_MAX_LENGTH = 100
EARLIEST_DATE_OF_BIRTH = date(1900, 1, 1)
_UTC_OFFSET = re.compile(r"^(UTC|GMT)?\s*[+-]\d", re.IGNORECASE)


@lru_cache(maxsize=1)
def _known_timezone_names() -> frozenset[str]:
    # available_timezones() walks the tz database on disk; read it once.
    return frozenset(available_timezones())


def clean_name(value: str, *, field_label: str) -> str:
    """Trim a first or last name and check it is 1-100 characters."""
    if not isinstance(value, str):
        raise ValidationError(f"{field_label} must be a string.")
    trimmed = value.strip()
    if not trimmed:
        raise ValidationError(f"{field_label} must not be blank.")
    if len(trimmed) > NAME_MAX_LENGTH:
        raise ValidationError(
            f"{field_label} must be at most {NAME_MAX_LENGTH} characters "
            f"(got {len(trimmed)})."
        )
    return trimmed


def clean_timezone(value: str) -> str:
    """Accept only IANA names that zoneinfo can load (not offsets like +05:00)."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("Time zone must be an IANA name such as America/New_York.")
    name = value.strip()
    if name not in _known_timezone_names():
        if _UTC_OFFSET.match(name):
            raise ValidationError(
                f"'{name}' is a UTC offset, not a time zone: offsets do not follow "
                "daylight saving time. Use an IANA name such as Asia/Kathmandu."
            )
        raise ValidationError(
            f"'{name}' is not a known IANA time zone (for example Europe/London)."
        )
    return name


def clean_date_of_birth(value: date, *, timezone_name: str | None) -> date:
    """Check a birth date is a real date from 1900-01-01 up to today in the user's zone."""
    if isinstance(value, datetime) or not isinstance(value, date):
        raise ValidationError("Date of birth must be a calendar date (YYYY-MM-DD).")
    if value < EARLIEST_DATE_OF_BIRTH:
        raise ValidationError("Date of birth must not be before 1900-01-01.")
    if timezone_name:
        today_there = django_timezone.now().astimezone(load_timezone(timezone_name)).date()
    else:
        # Without a valid zone (it failed its own check) refuse only what is in
        # the future everywhere: the earliest-running zone is UTC+14.
        today_there = (django_timezone.now() + timedelta(hours=14)).date()
    if value > today_there:
        raise ValidationError(
            f"Date of birth {value.isoformat()} is in the future "
            f"(today is {today_there.isoformat()} in {timezone_name or 'any time zone'})."
        )
    return value


def clean_user_fields(data: dict) -> dict:
    """Validate all four fields together; raise one ValidationError naming each bad field."""
    errors: dict[str, list[str]] = {}
    cleaned: dict = {}
    for field, label in (("first_name", "First name"), ("last_name", "Last name")):
        try:
            cleaned[field] = clean_name(data.get(field), field_label=label)
        except ValidationError as exc:
            errors[field] = exc.messages
    try:
        cleaned["timezone"] = clean_timezone(data.get("timezone"))
    except ValidationError as exc:
        errors["timezone"] = exc.messages
    try:
        cleaned["date_of_birth"] = clean_date_of_birth(
            data.get("date_of_birth"), timezone_name=cleaned.get("timezone")
        )
    except ValidationError as exc:
        errors["date_of_birth"] = exc.messages
    if errors:
        raise ValidationError(errors)
    return cleaned

