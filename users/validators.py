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


# --- mentions: a recipient's user ids at the chat services, and their consent ---------------------
# Checked by shape only: confirming that an id exists needs a bot token at the service (Slack's
# users.lookupByEmail, Microsoft Graph), which a webhook destination has not got.

# A Slack member id: U or W, then capital letters and digits (U024BE7LH, W012A3CDE).
SLACK_USER_ID_PATTERN = r"^[UW][A-Z0-9]{2,31}$"
_SLACK_USER_ID_RULE = (
    "a member id such as U024BE7LH (U or W, then capital letters and digits; in Slack: the "
    "profile's ⋮ menu, Copy member ID), not a name such as @ada."
)
# A Discord user id: a snowflake, 17 to 20 digits.
DISCORD_USER_ID_PATTERN = r"^[0-9]{17,20}$"
_DISCORD_USER_ID_RULE = (
    "17 to 20 digits, such as 123456789012345678 (in Discord, with developer mode on: the "
    "profile's Copy User ID), not a user name."
)
# A Teams user: a user principal name (ada@example.com; at most 113 characters, Entra's limit),
# or an Entra object id, a GUID (stored in lower case).
TEAMS_UPN_PATTERN = r"^[A-Za-z0-9._%+'-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$"
TEAMS_OBJECT_ID_PATTERN = r"^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$"
SLACK_USER_ID_MAX_LENGTH = 32
DISCORD_USER_ID_MAX_LENGTH = 20
TEAMS_USER_ID_MAX_LENGTH = 113


def _optional_text(value: object, *, label: str) -> str:
    """A text field as given, trimmed; "" for none (None or blank)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{label} must be a string.")
    return value.strip()


def _chat_id(value: object, *, label: str, pattern: str, rule: str) -> str:
    """A chat user id that matches `pattern` whole, trimmed, or "" for none; else "<label> must be <rule>"."""
    trimmed = _optional_text(value, label=label)
    if trimmed and not re.fullmatch(pattern, trimmed):
        raise ValidationError(f"{label} must be {rule}")
    return trimmed


def clean_slack_user_id(value: object) -> str:
    """A Slack member id such as U024BE7LH, or "" for none: never a name (`@ada`) or a display name."""
    return _chat_id(value, label="Slack user id", pattern=SLACK_USER_ID_PATTERN, rule=_SLACK_USER_ID_RULE)


def clean_discord_user_id(value: object) -> str:
    """A Discord user id (a snowflake of 17 to 20 digits), or "" for none."""
    return _chat_id(
        value, label="Discord user id", pattern=DISCORD_USER_ID_PATTERN, rule=_DISCORD_USER_ID_RULE
    )


def clean_teams_user_id(value: object) -> str:
    """A Teams user as a user principal name (ada@example.com) or an Entra object id (a GUID, stored
    in lower case), or "" for none."""
    trimmed = _optional_text(value, label="Teams user id")
    if not trimmed:
        return ""
    if re.fullmatch(TEAMS_OBJECT_ID_PATTERN, trimmed.lower()):
        return trimmed.lower()
    if len(trimmed) <= TEAMS_USER_ID_MAX_LENGTH and re.fullmatch(TEAMS_UPN_PATTERN, trimmed):
        return trimmed
    raise ValidationError(
        "Teams user id must be a user principal name such as ada@example.com (no spaces, at most "
        f"{TEAMS_USER_ID_MAX_LENGTH} characters) or an Entra object id such as "
        "8c2f5a7e-1b3d-4e6f-9a0b-2c4d6e8f0a1b."
    )


def clean_mention_consent(value: object) -> bool | None:
    """Whether the person agrees to be mentioned: True, False, or None for the company default."""
    if value is not None and not isinstance(value, bool):
        raise ValidationError("Must be true, false or null (the company default, MENTIONS_BY_DEFAULT).")
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
    trimmed = _optional_text(value, label="Email")
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
