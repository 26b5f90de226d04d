"""A recipient's editable fields, declared once: each field's name, cleaner and help texts.

Every writer of a recipient takes its list of fields from RECIPIENT_FIELDS: the
services (user_create, user_update, the bulk import), the API's serializer (its
fields, their help texts, the rules it runs on its own), the CSV import (its
columns and their help) and the console's form (its fields and help texts).
The model keeps its columns (Django needs them), and users/tests/test_fields.py
checks that each field here has its column.

The handlers read a recipient by a shape of their own,
scheduling.handlers.RecipientRow (and its protocol, Recipient): scheduling sits
beneath users and cannot import this module, nor can a typed NamedTuple be
built from a list. So that shape stays where it is, and the same test checks it
against this table: a field a handler reads that is not a recipient's field here
fails it.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import partial
from typing import Any, NotRequired, Required, TypedDict

from django.conf import settings
from django.core.exceptions import ValidationError

from scheduling.celebration import YEARLESS_YEAR, Visibility, year_known
from scheduling.event_types import EventType
from scheduling.labels import LABEL_MAX_LENGTH, LABELS_MAX_COUNT, clean_labels
from scheduling.languages import LANGUAGE_MAX_LENGTH, clean_language
from scheduling.times import clean_timezone
from users.validators import (
    EMAIL_MAX_LENGTH,
    EXTERNAL_ID_MAX_LENGTH,
    NAME_MAX_LENGTH,
    clean_discord_user_id,
    clean_email,
    clean_external_id,
    clean_mention_consent,
    clean_name,
    clean_past_date,
    clean_send_time,
    clean_slack_user_id,
    clean_teams_user_id,
)

# A birthday's month and day without the year, as ISO 8601 (and vCard) write it.
MONTH_DAY = re.compile(r"--(?P<month>\d\d)-(?P<day>\d\d)")
# What the API's schema says a date of birth looks like: a date, or a month and day.
DATE_OF_BIRTH_PATTERN = r"^(\d{4}-\d{2}-\d{2}|--\d{2}-\d{2})$"


@dataclass(frozen=True)
class RecipientField:
    """One field a writer gives a recipient (the API, the console, the CSV import, code)."""

    name: str
    # The value as stored, or a ValidationError saying what is wrong (the caller names
    # the field). Called with the value; an `in_zone` field's also with timezone_name.
    clean: Callable[..., Any]
    # The API's description of it (OpenAPI, OPTIONS).
    help_text: str
    # The console form's, shorter: "" for none.
    form_help: str
    # The CSV import's, after the column's name in its help: "" for none.
    column_help: str
    # Given on creation, always: the API requires it, a CSV must have its column.
    required: bool = False
    # Checked in the recipient's own time zone (a date "up to today"): cleaned after
    # the others, given the zone as cleaned (None if it is not valid).
    in_zone: bool = False
    # Stored in the column of its name, cleaned with the others (clean_user_fields);
    # False: paused, which pauses or resumes (paused_at, resumed_at) instead.
    column: bool = True

    def cleaned(self, value: object, *, timezone_name: str | None = None) -> Any:
        """The value as stored; `timezone_name`: the recipient's zone as cleaned, for an `in_zone` field."""
        return self.clean(value, timezone_name=timezone_name) if self.in_zone else self.clean(value)


def _clean_anniversary_date(value: object, *, timezone_name: str | None) -> date | None:
    if value is None:
        return None
    return clean_past_date(value, label="Anniversary date", timezone_name=timezone_name)


def clean_date_of_birth(value: object, *, timezone_name: str | None) -> date:
    """A date of birth, or a month and day without the year (--MM-DD), stored in YEARLESS_YEAR."""
    if isinstance(value, str) and value.startswith("--"):
        match = MONTH_DAY.fullmatch(value.strip())
        if match is None:
            raise ValidationError("Date of birth without a year must be --MM-DD, such as --06-15.")
        month, day = int(match["month"]), int(match["day"])
        try:
            # In a leap year: --02-29 is a day, --02-30 is not.
            return date(YEARLESS_YEAR, month, day)
        except ValueError:
            raise ValidationError(f"Date of birth {value.strip()} is not a day of the year.") from None
    if isinstance(value, date) and not isinstance(value, datetime) and not year_known(value):
        return value  # as stored: a month and day without the year
    return clean_past_date(value, label="Date of birth", timezone_name=timezone_name)


def clean_flag(value: object) -> bool:
    """A yes-or-no field: a bool, never "true" or 1; None (not given): False."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValidationError("Must be true or false.")
    return value


def clean_visibility(value: object) -> dict[str, str | None]:
    """A recipient's visibility choices: {event type: public | private | none | None (the company default)}."""
    if not isinstance(value, Mapping):
        raise ValidationError(
            'Must be an object from event types to public, private, none or null, such as {"BIRTHDAY": "private"}.'
        )
    errors = []
    cleaned: dict[str, str | None] = {}
    for event_type, visibility in value.items():
        if event_type not in EventType.values:
            errors.append(f"{event_type!r} is not an event type ({', '.join(EventType.values)}).")
        elif visibility is not None and visibility not in Visibility.values:
            errors.append(
                f"{event_type}: {visibility!r} is not one of {', '.join(Visibility.values)} "
                "(or null: the company default)."
            )
        else:
            cleaned[event_type] = visibility
    if errors:
        raise ValidationError(errors)
    return cleaned


def clean_paused(value: object) -> bool:
    """Whether to pause (True) or resume (False): a bool, never "true" or 1."""
    # The API refuses "true" or 1 before here; a caller in code is held to the same.
    if not isinstance(value, bool):
        raise ValidationError("Must be true or false.")
    return value


def _name_field(name: str, *, label: str) -> RecipientField:
    """A first or last name: trimmed, 1 to NAME_MAX_LENGTH characters, required."""
    return RecipientField(
        name=name,
        clean=partial(clean_name, field_label=label),
        help_text=f"Surrounding whitespace is trimmed; 1 to {NAME_MAX_LENGTH} characters must remain.",
        form_help="",
        column_help="",
        required=True,
    )


# --- mentions: whom a chat destination that mentions may notify, and whether they agreed ----------
# A chat kind names the field holding its service's id (kinds.base.Kind.mention_field); a destination
# with `mention_recipient` mentions the person it greets there, if mention_consent (or, when it is
# null, MENTIONS_BY_DEFAULT) says they agreed. Shape only: an id is not looked up at the service.
_NO_ID = "Empty or null: none."
MENTION_FIELDS: tuple[RecipientField, ...] = (
    RecipientField(
        name="slack_user_id",
        clean=clean_slack_user_id,
        help_text="Optional: the recipient's Slack member id, such as U024BE7LH (U or W, then capital letters "
        "and digits), which a Slack destination that mentions uses to notify them, if they agreed "
        "(mention_consent). A name such as @ada is refused (400). " + _NO_ID,
        form_help="Optional: their Slack member id, such as U024BE7LH (profile ⋮ menu: Copy member ID).",
        column_help="a Slack member id such as U024BE7LH; empty for none",
    ),
    RecipientField(
        name="discord_user_id",
        clean=clean_discord_user_id,
        help_text="Optional: the recipient's Discord user id, 17 to 20 digits, which a Discord destination "
        "that mentions uses to notify them, if they agreed (mention_consent). " + _NO_ID,
        form_help="Optional: their Discord user id, 17 to 20 digits (profile: Copy User ID).",
        column_help="17 to 20 digits; empty for none",
    ),
    RecipientField(
        name="teams_user_id",
        clean=clean_teams_user_id,
        help_text="Optional: the recipient's Microsoft Teams user, as a user principal name (ada@example.com, "
        "no spaces) or an Entra object id (a GUID, stored in lower case), which a Teams destination that "
        "mentions uses to notify them, if they agreed (mention_consent). " + _NO_ID,
        form_help="Optional: their Teams user principal name (ada@example.com) or Entra object id.",
        column_help="a user principal name or an Entra object id; empty for none",
    ),
    RecipientField(
        name="mention_consent",
        clean=clean_mention_consent,
        help_text="Optional: whether the recipient agrees to be mentioned (notified by name) in the greetings of "
        "chat destinations that mention: true or false; null (the default) follows the company's default, "
        f"MENTIONS_BY_DEFAULT (now {str(settings.MENTIONS_BY_DEFAULT).lower()}). Without it nobody is "
        "mentioned, and a message never mentions anyone but the person it greets.",
        form_help="Whether they agree to be mentioned in chat greetings; Unknown: the company default "
        "(MENTIONS_BY_DEFAULT).",
        column_help="true/false, 1/0 or yes/no; empty for the company default",
    ),
)


# In the order the API shows them, the console lays them out and the CSV import lists them.
RECIPIENT_FIELDS: tuple[RecipientField, ...] = (
    _name_field("first_name", label="First name"),
    _name_field("last_name", label="Last name"),
    RecipientField(
        name="date_of_birth",
        clean=clean_date_of_birth,
        help_text=(
            "A real date (YYYY-MM-DD) from 1900-01-01 up to today in the "
            "recipient's own time zone, or a month and day without the year (--MM-DD, "
            "such as --06-15): then no message states an age or a birth year for them. A Feb 29 "
            "birthday, with or without its year, is celebrated on Feb 28 in common years."
        ),
        form_help="YYYY-MM-DD, or --MM-DD (such as --06-15) for a birthday without its year.",
        column_help="YYYY-MM-DD, or --MM-DD without the year",
        required=True,
        in_zone=True,
    ),
    RecipientField(
        name="timezone",
        clean=clean_timezone,
        help_text=(
            "An IANA time zone name, such as America/New_York; the messages go out at the "
            f"send_time ({settings.EVENT_SEND_TIME} unless the recipient has their own) there. "
            "UTC offsets such as +05:00 are refused: they do not follow daylight saving time."
        ),
        form_help="IANA time zone name, e.g. America/New_York or Asia/Kathmandu "
        "(not an offset such as +05:45: offsets do not follow daylight saving time).",
        column_help="IANA name",
        required=True,
    ),
    RecipientField(
        name="external_id",
        clean=clean_external_id,
        help_text=(
            "Optional: the client's own id for the recipient, held by no other recipient "
            "(400 if another holds it). Surrounding whitespace is trimmed; 1 to "
            f"{EXTERNAL_ID_MAX_LENGTH} characters must remain, or none: null or an empty "
            "string means the recipient has none. A PUT without it leaves it as it is. "
            "Find a recipient by it with `GET /api/v1/users/?external_id=…`."
        ),
        form_help="Optional: the client's own id for this recipient, held by no other "
        "(imports and API clients find the recipient by it).",
        column_help="the client's own id: a row whose external_id a recipient already has updates "
        "that recipient, so the import can be run again",
    ),
    RecipientField(
        name="anniversary_date",
        clean=_clean_anniversary_date,
        help_text=(
            "Optional: the wedding date, by the same rules as date_of_birth. With it "
            "the recipient also gets a wedding anniversary message every year, at the "
            "same local time as the birthday one (a Feb 29 wedding on Feb 28 in common "
            "years); null removes it. A PUT without it leaves it as it is."
        ),
        form_help="Optional: the wedding date. With it the recipient also gets a "
        "wedding anniversary message every year.",
        column_help="YYYY-MM-DD, a wedding date; empty for none",
        in_zone=True,
    ),
    RecipientField(
        name="send_time",
        clean=clean_send_time,
        help_text=(
            "Optional: the recipient's own local send time, HH:MM from 00:00 to 23:59 (such as "
            f"10:30); null means the default, {settings.EVENT_SEND_TIME}. A time that does not "
            "exist on the day (inside a DST gap) moves forward by the gap; one that happens "
            "twice takes the first. A change moves the pending events' send times and keeps "
            "their occurrence and idempotency key. A PUT without it leaves it as it is."
        ),
        form_help="Optional: the recipient's own local send time, HH:MM (such as 10:30). Empty: the default.",
        column_help="HH:MM, the recipient's own local send time; empty for the default",
    ),
    RecipientField(
        name="labels",
        clean=clean_labels,
        help_text=(
            "Optional: a few labels a destination's audience chooses recipients by, such as "
            '["team:platform", "office:berlin", "remote"]: lowercase letters, digits and . _ -, '
            f"optionally one key:value, at most {LABEL_MAX_LENGTH} characters each and "
            f"{LABELS_MAX_COUNT} in all; taken in any case and stored lowercase, sorted, without "
            "repeats. null or [] means none. A change applies to the occurrences claimed after it; "
            "one already being sent is not touched. A PUT without it leaves it as it is. Filter "
            "the list by it with `GET /api/v1/users/?label=team:platform`."
        ),
        form_help="Optional: labels destinations' audiences choose recipients by, such as "
        "team:platform, office:berlin (separated by commas; a space is not a separator). Lowercase letters, digits "
        "and . _ -, optionally one key:value.",
        column_help="separated by semicolons, such as team:platform;office:berlin; empty for none",
    ),
    RecipientField(
        name="language",
        clean=clean_language,
        help_text=(
            "Optional: the language of the recipient's messages, a BCP 47 tag such as de, pt-BR or "
            f"zh-Hant-TW (at most {LANGUAGE_MAX_LENGTH} characters; stored in the usual case, "
            "pt-br becomes pt-BR). A message uses the event type's template in that language, else "
            "in its base language (pt-BR, then pt), else the type's default. null or an empty "
            "string means none: the default. A PUT without it leaves it as it is."
        ),
        form_help="Optional: the language of their messages, a BCP 47 tag such as de or pt-BR; "
        "without a template in it, its base language's (pt-BR: pt), else the default.",
        column_help="a BCP 47 tag such as de or pt-BR; empty for the default",
    ),
    # --- the person's say (scheduling.celebration) ---
    RecipientField(
        name="hide_age",
        clean=clean_flag,
        help_text=(
            "Optional: true: no message states the recipient's age or birth year; a text that "
            "uses {age} falls back to the next one without it (the type's default, else the "
            "built-in text). Each change is recorded (celebration_changes). Omitted: unchanged "
            "(false on creation)."
        ),
        form_help="Never state their age or birth year: a text with {age} falls back to one without.",
        column_help="true/false, 1/0 or yes/no: never state their age; empty: false",
    ),
    RecipientField(
        name="visibility",
        clean=clean_visibility,
        help_text=(
            "Optional: the recipient's own choice per event type, over the company default: "
            '{"BIRTHDAY": "private"}. public: every destination that wants the occurrence; '
            "private: only destinations that reach the person alone (personal), never a channel "
            "post or a digest line; none: nothing anywhere (the occurrence FAILS with the reason "
            '"recipient not celebrated"). null for a type: back to the company default. A change '
            "applies to everything not yet begun: a delivery queued and not yet sent is withdrawn, "
            "a digest not yet sent leaves the person out. Each change is recorded "
            "(celebration_changes). A type not named is unchanged."
        ),
        # The console edits it with one field per event type (console.forms).
        form_help="",
        column_help="TYPE:visibility separated by semicolons, such as BIRTHDAY:private;ANNIVERSARY:none "
        "(public, private or none; TYPE:default for the company default); empty: unchanged",
        column=False,
    ),
    # --- end of the person's say ---
    RecipientField(
        name="email",
        clean=clean_email,
        help_text=(
            "Optional: the recipient's own email address, such as ada@example.com (at most "
            f"{EMAIL_MAX_LENGTH} characters). Stored normalised: trimmed, the domain in lower case and, "
            "if it is not ASCII, in its IDNA form (ada@Bücher.Example becomes ada@xn--bcher-kva.example); "
            "the part before the @ as given. A quoted part before the @, an address without a domain "
            "name (ada@localhost, ada@[192.0.2.1]) or anything else that is not an address is refused "
            "with a 400. null or an empty string means none. A PUT without it leaves it as it is. "
            "Erasing the recipient removes it with everything else."
        ),
        form_help="Optional: the recipient's own email address, such as ada@example.com.",
        column_help="an email address such as ada@example.com; empty for none",
    ),
    RecipientField(
        name="paused",
        clean=clean_paused,
        help_text=(
            "Optional: true holds back every message of the recipient's from now on: an occurrence "
            'whose send time comes while paused is not sent but FAILED with the reason "recipient '
            'paused", and the next one is scheduled. false resumes: the next occurrence whose send '
            "time has not passed is sent. Who paused or resumed, and when, are recorded (paused_by, "
            "paused_at, resumed_by, resumed_at). Omitted: unchanged (false on creation)."
        ),
        # The console pauses and resumes by its list's actions, not on the form.
        form_help="",
        column_help="true/false, 1/0 or yes/no: their greetings held back, recorded as paused by --by; "
        "empty: not paused",
        column=False,
    ),
    *MENTION_FIELDS,
)

FIELDS_BY_NAME: Mapping[str, RecipientField] = {field.name: field for field in RECIPIENT_FIELDS}
# The fields stored in a column of their name, cleaned together by clean_user_fields.
USER_FIELDS: tuple[str, ...] = tuple(field.name for field in RECIPIENT_FIELDS if field.column)
# The order they are cleaned in, and so their errors told in: the table's, but the dates
# checked in the recipient's time zone after it (a stable sort keeps the rest in order).
_CLEANING_ORDER = sorted((f for f in RECIPIENT_FIELDS if f.column), key=lambda field: field.in_zone)


class NewRecipient(TypedDict, total=False):
    """The fields a recipient is created with in code (users.services.user_create), as given.

    Its keys are USER_FIELDS, the required ones RECIPIENT_FIELDS' `required`
    (users/tests/test_fields.py checks both): the types a caller may give are
    the one thing the table cannot tell a type checker.
    """

    first_name: Required[str]
    last_name: Required[str]
    date_of_birth: Required[date]
    timezone: Required[str]
    external_id: NotRequired[str | None]
    anniversary_date: NotRequired[date | None]
    send_time: NotRequired[str | time | None]
    labels: NotRequired[Sequence[str] | None]
    language: NotRequired[str | None]
    # mentions (MENTION_FIELDS)
    slack_user_id: NotRequired[str | None]
    discord_user_id: NotRequired[str | None]
    teams_user_id: NotRequired[str | None]
    mention_consent: NotRequired[bool | None]
    hide_age: NotRequired[bool]
    email: NotRequired[str | None]


def clean_user_fields(data: Mapping[str, object]) -> dict[str, Any]:
    """Validate every column field together (USER_FIELDS); raise one ValidationError naming each bad field.

    An optional field `data` lacks is cleaned as None: none, or its empty value
    (labels [], language "").
    """
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    for field in _CLEANING_ORDER:
        value = data.get(field.name)
        try:
            cleaned[field.name] = field.cleaned(value, timezone_name=cleaned.get("timezone"))
        except ValidationError as exc:
            errors[field.name] = exc.messages
    if errors:
        raise ValidationError(errors)
    return cleaned
