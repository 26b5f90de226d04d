"""The rules for a recipient's fields, shared by the API, the admin and the importer (by users.fields)."""

from datetime import date, datetime, time, timedelta

from django.core.exceptions import ValidationError
from django.utils import timezone as django_timezone

from scheduling.times import load_timezone, time_of_day

NAME_MAX_LENGTH = 100
EXTERNAL_ID_MAX_LENGTH = 255
# The earliest date of birth, and of a wedding.
EARLIEST_DATE = date(1900, 1, 1)


def clean_name(value: object, *, field_label: str) -> str:
    """Trim a first or last name and check it is 1-100 characters."""
    if not isinstance(value, str):
        raise ValidationError(f"{field_label} must be a string.")
    trimmed = value.strip()
    if not trimmed:
        raise ValidationError(f"{field_label} must not be blank.")
    if len(trimmed) > NAME_MAX_LENGTH:
        raise ValidationError(
            f"{field_label} must be at most {NAME_MAX_LENGTH} characters (got {len(trimmed)})."
        )
    return trimmed


def clean_external_id(value: str | None) -> str | None:
    """Trim a client's own id for the recipient; blank means none (None, stored as NULL).

    NULL rather than "": the unique constraint lets any number of recipients
    have no id, but would let only one have "".
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError("External id must be a string.")
    trimmed = value.strip()
    if len(trimmed) > EXTERNAL_ID_MAX_LENGTH:
        raise ValidationError(
            f"External id must be at most {EXTERNAL_ID_MAX_LENGTH} characters (got {len(trimmed)})."
        )
    return trimmed or None


def clean_send_time(value: str | time | None) -> time | None:
    """A recipient's own local send time, HH:MM (24-hour); None: the event type's default.

    Whole minutes only, written one way ("09:30", not "9:30", "09:30:00" or
    "9am"): what a client sends is what it reads back. An empty string is
    refused rather than taken for None, so that a client that meant to send
    a time and sent nothing hears about it.
    """
    if value is None:
        return None
    if isinstance(value, time):
        # The stored value, or one a form has parsed: whole minutes, no zone of its own.
        if value.second or value.microsecond or value.tzinfo is not None:
            raise ValidationError("Send time must be whole minutes, HH:MM.")
        return value
    at = time_of_day(value)
    if at is None:
        raise ValidationError(
            "Send time must be a local time HH:MM from 00:00 to 23:59, such as 10:30, or null for the "
            "default."
        )
    return at


def clean_past_date(value: object, *, label: str, timezone_name: str | None) -> date:
    """Check a date of birth or wedding is a real date from 1900-01-01 up to today in the user's zone."""
    if isinstance(value, datetime) or not isinstance(value, date):
        raise ValidationError(f"{label} must be a calendar date (YYYY-MM-DD).")
    if value < EARLIEST_DATE:
        raise ValidationError(f"{label} must not be before {EARLIEST_DATE.isoformat()}.")
    if timezone_name:
        today_there = django_timezone.now().astimezone(load_timezone(timezone_name)).date()
    else:
        # Without a valid zone (it failed its own check) refuse only what is in
        # the future everywhere: the earliest-running zone is UTC+14.
        today_there = (django_timezone.now() + timedelta(hours=14)).date()
    if value > today_there:
        raise ValidationError(
            f"{label} {value.isoformat()} is in the future "
            f"(today is {today_there.isoformat()} in {timezone_name or 'any time zone'})."
        )
    return value
