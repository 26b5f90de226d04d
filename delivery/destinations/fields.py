"""What an operator may set on a destination (besides its secrets), declared once: DestinationSettings.

Each of its fields names its type and default, its cleaner and its help: the
API's words (its OpenAPI description), and the console form's where a form says
it otherwise (a box left empty, none ticked). The services take the settings
whole to create a destination (destination_create) and clean any part of them
by the same cleaners (settings_clean, an edit); the API's serializer and the
console's form take their field lists (EDITABLE_FIELDS) and help texts
(SETTINGS) from here. A cleaner returns the value as stored, or raises
ValidationError with its field's messages.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import time, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator

from delivery.credentials.receiver_urls import url_normalise
from delivery.models import (
    DIGEST_DAYS_AHEAD_MAX,
    MENTIONING_FORMATS,
    WEEKDAYS,
    Destination,
    DestinationFormat,
    DigestLanguage,
    Weekend,
)
from delivery.receivers.addresses import (
    ReceiverPolicy,
    address_refusal,
    host_addresses,
    parse_address,
    webhook_url_validate,
)
from delivery.receivers.smtp import DEFAULT_PORTS as SMTP_DEFAULT_PORTS
from delivery.receivers.smtp import SCHEMES as SMTP_SCHEMES
from delivery.receivers.smtp import relay_url_refusal
from scheduling.event_types import EventType
from scheduling.handlers import REGISTRY
from scheduling.labels import clean_labels
from scheduling.messages import MESSAGE_TEMPLATE_MAX_LENGTH, template_errors
from scheduling.times import clean_timezone, time_of_day
from users.validators import clean_email

# The longest receiver URL accepted.
URL_MAX_LENGTH = 2000
# A change of one of these moves the next digest (delivery.rules.digest_calendar.digest_schedule).
DIGEST_FIELDS = ("digest_time", "digest_timezone", "weekend", "digest_days_ahead", "digest_weekday")
# The most fixed addresses of an email destination: a mailbox or a few, not a mailing list.
EMAIL_TO_MAX = 20
BOTH_LABELS = "A label both greeted and excluded: the exclusion would always win."


@dataclass(frozen=True)
class Setting:
    """How one field of DestinationSettings is cleaned and explained."""

    clean: Callable[[Any], object]
    # The API's words (the OpenAPI description of the field).
    help: str
    # The console form's, where a form says it otherwise; "": none.
    form_help: str = ""


def _setting(clean: Callable[[Any], object], help: str, form_help: str = "") -> dict[str, Setting]:  # noqa: A002
    return {"setting": Setting(clean=clean, help=help, form_help=form_help)}


def destination_url_validate(*, url: str) -> str:
    """The destination URL in its one spelling (delivery.credentials.receiver_urls), if it is one a worker may POST to
    (or, smtps://, smtp:// or smtp+plain://, a mail relay it may send through); ValidationError if not (never
    echoing it: it may hold a token)."""
    url = url.strip()
    if _scheme(url) in SMTP_SCHEMES:
        return relay_url_validate(url=url)
    try:
        URLValidator(schemes=["http", "https"])(url)
    except ValidationError:
        raise ValidationError("Enter an http or https URL.") from None
    if len(url) > URL_MAX_LENGTH:
        raise ValidationError(f"A URL of at most {URL_MAX_LENGTH} characters.")
    try:
        url = url_normalise(url)
        # The rules the worker applies at each connection, checked here first:
        # https, and no address behind us unless its network is allowed.
        webhook_url_validate(url=url)
    except ValidationError as exc:
        raise ValidationError(exc.messages) from None
    return url


def _scheme(url: str) -> str:
    """The scheme of what may not be a URL at all (urlsplit raises on a bad IPv6 host)."""
    return url.partition(":")[0].strip().lower()


def relay_url_validate(*, url: str) -> str:
    """An email destination's relay URL, normalised, if the worker may connect to it: smtps:// (implicit TLS),
    smtp:// (STARTTLS) or smtp+plain:// (WEBHOOK_ALLOW_HTTP), a port from 1 to 65535, and no address the
    receiver policy refuses (checked after DNS too, as a receiver's: delivery.receivers.addresses)."""
    if len(url) > URL_MAX_LENGTH:
        raise ValidationError(f"A URL of at most {URL_MAX_LENGTH} characters.")
    policy = ReceiverPolicy.from_settings()
    refusal = relay_url_refusal(url=url, policy=policy)
    if refusal:
        raise ValidationError(refusal)
    parts = urllib.parse.urlsplit(url)  # relay_url_refusal parsed it
    host, port = parts.hostname or "", parts.port or SMTP_DEFAULT_PORTS[parts.scheme.lower()]
    if parse_address(host) is None:
        try:
            answers = host_addresses(host, port)
        except (OSError, UnicodeError):
            answers = []  # not resolvable now: every connection is checked after its own DNS
        refusals = [
            address_refusal(address=a, policy=policy)
            for a in (parse_address(answer) for answer in answers)
            if a is not None
        ]
        if refusals and all(refusals):
            first = refusals[0]
            assert first is not None  # all(refusals)
            raise ValidationError(first.describe(host=host))
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path or "/", "", ""))


def _address(value: object) -> str:
    """An email address as users.validators.clean_email stores it ("" for none)."""
    return clean_email(value)


def _addresses(value: Sequence[str] | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError("A list of email addresses.")
    cleaned = [clean_email(each) for each in value]
    if "" in cleaned:
        raise ValidationError("An empty address.")
    if len(set(cleaned)) != len(cleaned):
        raise ValidationError("An address is named twice.")
    if len(cleaned) > EMAIL_TO_MAX:
        raise ValidationError(f"At most {EMAIL_TO_MAX} addresses.")
    return cleaned


def _display_name(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 100:
        raise ValidationError("A name of at most 100 characters.")
    # One header line: whatever would end it is refused here rather than changed when sent.
    if any(ch in value for ch in "\r\n\x00"):
        raise ValidationError("A name on one line.")
    return value.strip()


def _username(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 200 or any(ch in value for ch in "\r\n\x00"):
        raise ValidationError("A user name of at most 200 characters, on one line.")
    return value


def _password(value: object) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > 500 or any(ch in value for ch in "\r\n\x00"):
        raise ValidationError("A password of at most 500 characters, on one line.")
    return value


def destination_messages_clean(value: object) -> dict[str, str]:
    """A destination's own texts by event type ({} or None: none), each valid as that type's template is."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValidationError(
            'An object from event type to text, such as {"BIRTHDAY": "Happy birthday, {first_name}!"}.'
        )
    cleaned, errors = {}, []
    for event_type, body in value.items():
        handler = REGISTRY.get(event_type)
        if handler is None:
            errors.append(f"Not an event type: {event_type} (one of {', '.join(EventType.values)}).")
            continue
        if not isinstance(body, str) or len(body) > MESSAGE_TEMPLATE_MAX_LENGTH:
            errors.append(f"{event_type}: a text of at most {MESSAGE_TEMPLATE_MAX_LENGTH} characters.")
            continue
        if not body.strip():
            continue  # blank: the templates' text, as if the type were not named
        errors += [
            f"{event_type}: {error}"
            for error in template_errors(template=body, placeholders=handler.placeholders)
        ]
        cleaned[event_type] = body
    if errors:
        raise ValidationError(errors)
    return cleaned


def _name(value: str | None) -> str:
    name = (value or "").strip()
    longest = Destination._meta.get_field("name").max_length
    if not name:
        raise ValidationError("A destination needs a name.")
    if longest is not None and len(name) > longest:
        raise ValidationError(f"A name of at most {longest} characters.")
    return name


def _url(value: str | None) -> str:
    return destination_url_validate(url=value or "")


def _event_types(value: Sequence[str] | None) -> list[str]:
    types = list(value or [])
    wrong = [t for t in types if t not in EventType.values]
    if wrong:
        raise ValidationError(
            f"Not an event type: {', '.join(map(str, wrong))} (one of {', '.join(EventType.values)})."
        )
    if len(set(types)) != len(types):
        raise ValidationError("An event type is named twice.")
    return types


def _one_of(choices: Sequence[str]) -> Callable[[object], object]:
    def clean(value: object) -> object:
        if value not in choices:
            raise ValidationError(f"One of {', '.join(choices)}.")
        return value

    return clean


def _as_given(value: object) -> object:
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationError("true or false.")
    return value


def _max_rate(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise ValidationError("Requests per second above 0, or none for WEBHOOK_MAX_RATE.")
    return value


def _max_in_flight(value: int | None) -> int | None:
    if value is not None and not value >= 1:
        raise ValidationError("At least 1, or none for WEBHOOK_MAX_IN_FLIGHT.")
    return value


def _timeout(value: timedelta | None) -> timedelta | None:
    if value is not None and not timedelta(0) < value <= settings.WEBHOOK_TIMEOUT:
        raise ValidationError(
            f"Above 0 and at most WEBHOOK_TIMEOUT ({settings.WEBHOOK_TIMEOUT.total_seconds():g} s): "
            "deliveries' leases are sized from it."
        )
    return value


def _digest_time(value: time | str | None) -> time | None:
    """HH:MM (the one rule, scheduling.times), blank or None for none, or a time of whole minutes (a form's)."""
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return None
        value = time_of_day(value) or value
    if value is not None and (not isinstance(value, time) or value.second or value.microsecond):
        # The words a send time's are in (users.validators.clean_send_time): the one HH:MM rule.
        raise ValidationError(
            "Digest time must be a local time HH:MM from 00:00 to 23:59, such as 09:30, or empty for one "
            "message per greeting."
        )
    return value.replace(tzinfo=None) if value is not None else None


def _digest_timezone(value: str | None) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        return ""
    return clean_timezone(value)


def _days_ahead(value: object) -> int:
    # Not a bool (True is an int to Python), nor 7.5: a whole number of days.
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= DIGEST_DAYS_AHEAD_MAX:
        raise ValidationError(f"A whole number of days from 0 (the day itself) to {DIGEST_DAYS_AHEAD_MAX}.")
    return value


def _weekday(value: object) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str) or value.strip().upper() not in WEEKDAYS:
        raise ValidationError(f"One of {', '.join(WEEKDAYS)}, or null for a daily digest.")
    return value.strip().upper()


@dataclass(frozen=True)
class DestinationSettings:
    """What an operator sets on a destination (besides its secrets), whole: what destination_create takes."""

    name: str = field(metadata=_setting(_name, help="Unique; how operators and failure reasons name it."))
    url: str = field(
        metadata=_setting(
            _url,
            help="Where its deliveries are POSTed (http or https). A chat webhook's URL is its credential: "
            "answers show only its scheme and host (`https://hooks.slack.com/…`); POST .../reveal-url/ shows it "
            "whole. A user name or password in it (user:pass@) is refused. One receiver, one destination: "
            "spellings that differ only in the case of the scheme or host, a default port or a fragment are the "
            "same URL. A new URL takes its unsent deliveries with it, and its pause. On update, left out or "
            "given as shown: it stays.",
            form_help="Where its deliveries are POSTed. No user:password@ (refused): a chat webhook's URL is its "
            "credential, kept encrypted and shown only as its host.",
        )
    )
    event_types: Sequence[str] = field(
        default=(),
        metadata=_setting(
            _event_types,
            help="The event types it receives; empty (the default): every type, including types added later.",
            form_help="None ticked: every event type, including types added later.",
        ),
    )
    audience_labels: Sequence[str] = field(
        default=(),
        metadata=_setting(
            clean_labels,  # the recipients' own rule, so an audience names only labels a recipient can hold
            help="Whom it greets: recipients holding any of these labels (such as team:platform); empty (the "
            "default): everyone. Labels by the recipients' rule (lowercase letters, digits and . _ -, optionally "
            "one key:value), taken in any case. A change applies to the occurrences claimed after it is saved, on "
            "every scheduler; still one delivery per occurrence and destination.",
            form_help="Whom it greets: recipients with any of these labels (such as team:platform, separated by "
            "commas). Empty: everyone.",
        ),
    )
    excluded_labels: Sequence[str] = field(
        default=(),
        metadata=_setting(
            clean_labels,
            help="Whom it never greets: recipients holding any of these labels, even if in audience_labels "
            "(such as contractor); empty (the default): nobody is left out. No label may be in both lists.",
            form_help="Never recipients with any of these labels, even in the audience (such as contractor). "
            "Empty: nobody left out.",
        ),
    )
    message_overrides: Mapping[str, str] | None = field(
        default=None,
        metadata=_setting(
            destination_messages_clean,
            help='Its own text per event type, such as {"BIRTHDAY": "🎂 Happy birthday, {first_name}!"}, sent '
            "instead of the message templates' (whatever the recipient's language or the milestone); a type it "
            "does not name (or names with an empty text) keeps them. Checked as a template is: a placeholder the "
            "type does not offer is refused (400). Applies to the occurrences claimed after it is saved.",
        ),
    )
    format: str = field(
        default=DestinationFormat.STANDARD,
        metadata=_setting(
            _one_of(DestinationFormat.values),
            help="standard: the JSON body with Standard Webhooks signatures; slack, discord: the body their "
            "incoming webhooks accept, mentioning no one (with mention_recipient: only the person greeted); "
            "teams: an Adaptive Card for a Teams Workflows webhook (mentioning likewise); "
            "teams_messagecard: the legacy connector MessageCard (these four are not signed: their services check no "
            "signature, and their URL is the credential); email: a mail message (subject, text and HTML) through "
            "the SMTP relay its URL names (smtps://host:465, or smtp://host:587 with STARTTLS), from email_from, "
            "to each recipient's own address (personal) or to email_to.",
        ),
    )
    # mentions
    mention_recipient: bool = field(
        default=False,
        metadata=_setting(
            _flag,
            help="slack, discord and teams only (400 otherwise): each message mentions (notifies) the person it "
            "greets, by their user id at the service (the recipient's slack_user_id, discord_user_id or "
            "teams_user_id), if they agreed (their mention_consent, or MENTIONS_BY_DEFAULT when they have not "
            "said); a digest mentions each person it names who agreed, once. Nobody else is ever mentioned: "
            "what a name holds (<!channel>, @everyone, <at>) stays plain text. false (the default): nobody. "
            "Applies to the messages rendered after it is saved.",
            form_help="Slack, Discord and Teams: mention the person greeted, where they agreed (their mention "
            "consent, or the company default) and their user id there is known.",
        ),
    )
    email_from: str = field(
        default="",
        metadata=_setting(
            _address,
            help="email only (required there; 400 otherwise): the From address, such as greetings@example.com. Its "
            "domain makes each message's Message-ID (the same on every try) and List-Id; the relay signs the mail "
            "(DKIM) for it.",
            form_help="Email: the From address (its domain names the messages; the relay signs for it).",
        ),
    )
    email_from_name: str = field(
        default="",
        metadata=_setting(_display_name, help="email only: the From's display name, such as People Team."),
    )
    email_reply_to: str = field(
        default="",
        metadata=_setting(_address, help="email only: the Reply-To address; empty (the default): none."),
    )
    email_to: Sequence[str] = field(
        default=(),
        metadata=_setting(
            _addresses,
            help="email only: the fixed addresses every message goes to (an HR mailbox; a digest may go there); "
            "required unless personal, refused when personal (each message then goes to the recipient's own "
            "email, and nothing to one without an address or whose address is undeliverable).",
            form_help="Email: fixed addresses (comma-separated), or none for a personal destination.",
        ),
    )
    smtp_username: str = field(
        default="",
        metadata=_setting(_username, help="email only: the relay's login; empty: no AUTH."),
    )
    smtp_password: str | None = field(
        default=None,
        metadata=_setting(
            _password,
            help="email only: the relay's password, write-only: stored encrypted, never shown. On update, left "
            "out: it stays; empty: none.",
            form_help="The relay's password: stored encrypted, never shown. Left empty on a change: it stays.",
        ),
    )
    email_resend_unknown: bool = field(
        default=True,
        metadata=_setting(
            _flag,
            help="email only: when the connection is lost after a message's final dot without the relay's reply "
            "(the outcome unknown), send it again under the same Message-ID (true, the default: a receiving "
            "server or client that saw the first copy can tell the second, and a greeting lost is worse than one "
            "shown twice) or give it up (false).",
        ),
    )
    enabled: bool = field(
        default=True,
        metadata=_setting(_as_given, help="Disabled: occurrences claimed meanwhile get no delivery for it."),
    )
    personal: bool = field(
        default=False,
        metadata=_setting(
            _as_given,
            help="Whether it reaches the person it greets alone (their own inbox, a direct message): the only "
            "kind of destination a person celebrated privately is greeted at. False (the default) for a "
            "channel, a feed or a machine; never true for a digest, which names many people (400).",
            form_help="It reaches the person alone (their own inbox, a direct message): people celebrated "
            "privately are greeted here and nowhere else. Never a digest.",
        ),
    )
    max_rate: float | None = field(
        default=None,
        metadata=_setting(
            _max_rate, help="Most requests per second from all workers; null: WEBHOOK_MAX_RATE."
        ),
    )
    max_in_flight: int | None = field(
        default=None,
        metadata=_setting(
            _max_in_flight, help="Most requests open at once from all workers; null: WEBHOOK_MAX_IN_FLIGHT."
        ),
    )
    timeout: timedelta | None = field(
        default=None,
        metadata=_setting(
            _timeout, help="Seconds to wait for its answer; null: WEBHOOK_TIMEOUT, which it may not exceed."
        ),
    )
    digest_time: time | str | None = field(
        default=None,
        metadata=_setting(
            _digest_time,
            help="A daily digest at this local time (HH:MM) in digest_timezone: one message a day naming the "
            "date's people in its audience, and no message per occurrence; null (the default): one message per "
            "occurrence at each recipient's own send time. Exactly once per (destination, date), under its own "
            "idempotency key (digest- and a hash of the destination and the date).",
            form_help="A daily digest at this local time (HH:MM): one message a day naming the date's people, "
            "and no message per greeting. Empty: one message per greeting, at each recipient's send time.",
        ),
    )
    digest_timezone: str = field(
        default="",
        metadata=_setting(
            _digest_timezone,
            help="The IANA time zone of digest_time and of the dates a digest names (such as Europe/Berlin); "
            "required with a digest_time.",
            form_help="The IANA time zone of the digest time and of the dates it names (Europe/Berlin).",
        ),
    )
    weekend: str = field(
        default=Weekend.ON_THE_DAY,
        metadata=_setting(
            _one_of(Weekend.values),
            help="Where a Saturday's or Sunday's greetings go: ON_THE_DAY (the default); FRIDAY_BEFORE "
            "(Friday's digest names the weekend's people too) or MONDAY_AFTER (Monday's does), with no digest on "
            "the weekend. Only a digest destination may move them (400 otherwise).",
            form_help="Where a Saturday's or Sunday's greetings go; moving them needs a digest.",
        ),
    )

    digest_days_ahead: int = field(
        default=0,
        metadata=_setting(
            _days_ahead,
            help=f"Ahead of the day: its digest names the people whose date is this many days after the "
            f"digest's own (0, the default: that date; 7: \"In a week, Tuesday 8 December: Ada Lovelace's "
            f'birthday"), from 0 to {DIGEST_DAYS_AHEAD_MAX}. Only with a digest_time (400 otherwise). A change '
            "applies from the next digest: the dates between are named by none, or twice.",
            form_help=f"Name the people whose date is this many days ahead (0: the day itself; 7: a week's "
            f"notice; at most {DIGEST_DAYS_AHEAD_MAX}).",
        ),
    )
    digest_weekday: str | None = field(
        default=None,
        metadata=_setting(
            _weekday,
            help="A weekly digest: on this weekday only (MONDAY to SUNDAY), naming the seven days from its "
            "date (plus digest_days_ahead); null (the default): a daily one. Once per (destination, ISO week), "
            "whatever the weekday is changed to, under its own key (digest- and a hash of the destination and "
            "the week). Only with a digest_time and weekend ON_THE_DAY (400 otherwise).",
            form_help="Once a week on this day, naming the coming seven days. Empty: every day.",
        ),
    )
    digest_language: str = field(
        default=DigestLanguage.EN,
        metadata=_setting(
            _one_of(DigestLanguage.values),
            help="The language of its digest's words (the heading and each line): en (the default) or de. "
            "A channel's, whatever the language of the people it names.",
            form_help="The language of the digest's words.",
        ),
    )

    def values(self) -> dict[str, Any]:
        """Every field by name, as settings_clean takes them."""
        return {name: getattr(self, name) for name in EDITABLE_FIELDS}


# Each field's cleaner and help, in the order declared: the API's and the console's field lists.
SETTINGS: dict[str, Setting] = {each.name: each.metadata["setting"] for each in fields(DestinationSettings)}
EDITABLE_FIELDS = tuple(SETTINGS)


def settings_clean(values: Mapping[str, Any]) -> dict[str, Any]:
    """The settings given (any of EDITABLE_FIELDS), each by its cleaner, then the ones that go together
    checked together; ValidationError naming every field at fault."""
    unknown = set(values) - set(SETTINGS)
    if unknown:
        raise ValidationError({name: ["Not a destination field one may set."] for name in sorted(unknown)})
    cleaned: dict[str, Any] = {}
    errors: dict[str, list[str]] = {}
    for name, setting in SETTINGS.items():
        if name in values:
            try:
                cleaned[name] = setting.clean(values[name])
            except ValidationError as exc:
                errors[name] = exc.messages
    if not errors.keys() & {"audience_labels", "excluded_labels"} and labels_both(
        audience=cleaned.get("audience_labels", ()), excluded=cleaned.get("excluded_labels", ())
    ):
        errors["excluded_labels"] = [BOTH_LABELS]
    if not errors.keys() & set(DIGEST_FIELDS) and all(name in cleaned for name in DIGEST_FIELDS):
        # All three given (a create, a form): checked together now; a partial change is checked
        # against the stored ones under the row's lock (destination_update).
        try:
            digest_settings_check(
                Destination(
                    **{name: cleaned[name] for name in DIGEST_FIELDS}, personal=cleaned.get("personal", False)
                )
            )
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if not errors.keys() & {"format", "mention_recipient"} and all(
        name in cleaned for name in ("format", "mention_recipient")
    ):
        # Both given (a create, a form); a partial change is checked against the stored ones.
        try:
            mention_settings_check(
                Destination(format=cleaned["format"], mention_recipient=cleaned["mention_recipient"])
            )
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    return cleaned


# The settings only an email destination has, and what each is when a destination has none.
EMAIL_FIELDS = {
    "email_from": "",
    "email_from_name": "",
    "email_reply_to": "",
    "email_to": [],
    "smtp_username": "",
    "smtp_password_ciphertext": "",
}


def email_settings_check(destination: Destination, *, url: str) -> None:
    """An email destination's settings as they will be stored, with its relay `url`, checked together (and the
    other kinds' lack of them); ValidationError naming the field."""
    relay = _scheme(url) in SMTP_SCHEMES
    if destination.format != DestinationFormat.EMAIL:
        if relay:
            raise ValidationError({"url": ["A mail relay's URL is an email destination's (format email)."]})
        given = [name for name, none in EMAIL_FIELDS.items() if getattr(destination, name) != none]
        if given:
            shown = ["smtp_password" if name == "smtp_password_ciphertext" else name for name in given]
            raise ValidationError({name: ["Only an email destination has this."] for name in shown})
        return
    errors: dict[str, list[str]] = {}
    if not relay:
        errors["url"] = [
            "An email destination's URL is its relay: smtps://host:465, smtp://host:587 (STARTTLS)."
        ]
    if not destination.email_from:
        errors["email_from"] = ["An email destination needs a From address."]
    if destination.personal and destination.email_to:
        errors["email_to"] = [
            "A personal destination mails each recipient's own address: no fixed addresses."
        ]
    elif not destination.personal and not destination.email_to:
        errors["email_to"] = [
            "The addresses it mails (or make it personal: to each recipient's own address)."
        ]
    if errors:
        raise ValidationError(errors)


def mention_settings_check(destination: Destination) -> None:
    """Only a kind that mentions (MENTIONING_FORMATS) may mention; ValidationError naming the field."""
    if destination.mention_recipient and destination.format not in MENTIONING_FORMATS:
        raise ValidationError(
            {
                "mention_recipient": [
                    f"Only a {', '.join(MENTIONING_FORMATS)} destination mentions the people it greets "
                    f"(this one is {destination.format})."
                ]
            }
        )


def labels_both(*, audience: Sequence[str], excluded: Sequence[str]) -> bool:
    """Whether a label is both greeted and excluded (the exclusion would always win)."""
    return bool(set(audience) & set(excluded))


def digest_settings_check(destination: Destination) -> None:
    """The digest fields as they will be stored, checked together; ValidationError naming the field."""
    if destination.personal and destination.digest_time is not None:
        # A digest names the date's people to them all: it reaches no one alone.
        raise ValidationError({"personal": ["A daily digest names many people: it cannot be personal."]})
    if destination.digest_time is not None and not destination.digest_timezone:
        raise ValidationError(
            {"digest_timezone": ["A digest needs its IANA time zone (such as Europe/Berlin)."]}
        )
    if destination.digest_time is None and destination.digest_days_ahead:
        raise ValidationError(
            {"digest_days_ahead": ["Only a digest names days ahead: set a digest_time, or keep 0."]}
        )
    if destination.digest_time is None and destination.digest_weekday:
        raise ValidationError(
            {"digest_weekday": ["A weekly digest needs a digest_time: set one, or keep null."]}
        )
    if destination.digest_weekday and destination.weekend != Weekend.ON_THE_DAY:
        # A week's digest names every day of its seven, the weekend's among them.
        raise ValidationError(
            {"weekend": ["A weekly digest names the weekend's people with the rest: keep ON_THE_DAY."]}
        )
    if destination.digest_time is None and destination.weekend != Weekend.ON_THE_DAY:
        # Moving a weekend greeting is a digest's: a destination taking one message per greeting
        # gets it at the recipient's own send time, which the claim reaches on the day itself
        # (a Friday before would need it claimed two days early, and a Monday after would hold a
        # queued delivery for two days, past what EVENT_MAX_LATENESS lets a queued one wait).
        raise ValidationError(
            {
                "weekend": [
                    "Only a daily digest moves weekend greetings: set a digest_time, or keep ON_THE_DAY."
                ]
            }
        )
