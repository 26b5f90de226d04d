"""The rules for a recipient's fields, shared by the API, the admin and the importer (by users.fields)."""

import re
from datetime import date, datetime, time, timedelta

import idna
from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator
from django.utils import timezone as django_timezone

from scheduling.times import load_timezone, time_of_day

NAME_MAX_LENGTH = 100
EXTERNAL_ID_MAX_LENGTH = 255
# The earliest date of birth, and of a wedding.
EARLIEST_DATE = date(1900, 1, 1)
# RFC 5321's longest path (256) less its angle brackets: Django's EmailField's limit too.
EMAIL_MAX_LENGTH = 254
# A local part as a dot-atom (RFC 5322): what every mail relay and ESP takes. A quoted local
# part ("ada lovelace"@…) is refused: few relays take one, and it could hold an @ or a space.
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*")
# Django's rules for the rest (a domain of labels with a top-level one): no "localhost".
_EMAIL_VALIDATOR = EmailValidator(allowlist=[])


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


def clean_email(value: object) -> str:
    """A recipient's email address, normalised; "" (none) for None or blank.

    Trimmed; the domain in IDNA's ASCII form and lower case (Bücher.Example is
    xn--bcher-kva.example), by the idna package (IDNA 2008 with UTS 46's mapping,
    which the standard library's codec predates); the local part as given, since
    only the receiving domain may read its case. So one address is stored one way,
    and what a relay is handed is plain ASCII. A domain literal (ada@[192.0.2.1]) is
    refused: a greeting goes to a person's address at a domain name.
    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError("Email must be a string.")
    trimmed = value.strip()
    if not trimmed:
        return ""
    local, at, domain = trimmed.rpartition("@")
    if not at or not local or not domain:
        raise ValidationError("Email must be an address such as ada@example.com: a name, @ and a domain.")
    if not _DOT_ATOM.fullmatch(local):
        raise ValidationError(
            "Email's part before the @ may hold only letters, digits, dots (not two in a row, nor first "
            "or last) and ! # $ % & ' * + / = ? ^ _ ` { | } ~ -."
        )
    try:
        ascii_domain = idna.encode(domain, uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError):
        raise ValidationError(
            "Email's domain is not a valid domain name (such as example.com or bücher.example)."
        ) from None
    address = f"{local}@{ascii_domain}"
    if len(address) > EMAIL_MAX_LENGTH:
        raise ValidationError(f"Email must be at most {EMAIL_MAX_LENGTH} characters (got {len(address)}).")
    try:
        _EMAIL_VALIDATOR(address)
    except ValidationError:
        raise ValidationError(
            "Email must be an address such as ada@example.com, at a domain with a dot in it."
        ) from None
    return address
