from datetime import date
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.fields import StrictBooleanField, StrictCharField
from scheduling.celebration import Visibility, month_day, visibility_of, year_known
from scheduling.labels import LABEL_MAX_LENGTH, LABEL_PATTERN, LABELS_MAX_COUNT
from scheduling.languages import LANGUAGE_MAX_LENGTH
from scheduling.models import Event, EventType
from scheduling.selectors import celebration_defaults
from scheduling.serializers import PAUSE_RECORD_HELP
from scheduling.times import TIME_OF_DAY_PATTERN
from users.fields import (
    DATE_OF_BIRTH_PATTERN,
    FIELDS_BY_NAME,
    RECIPIENT_FIELDS,
    USER_FIELDS,
    clean_user_fields,
)
from users.models import User

# What every representation of an event shows; `next_event` shows just this.
NEXT_EVENT_FIELDS = [
    "id",
    "event_type",
    "status",
    "occurrence_date",
    "target_timestamp_utc",
    "target_timestamp_local",
    "target_timezone",
    "idempotency_key",
]

# What each event field means: the API's OpenAPI description and OPTIONS show it.
EVENT_FIELD_HELP = {
    "id": "The event's id.",
    "event_type": "What is celebrated: BIRTHDAY, or ANNIVERSARY (a wedding anniversary).",
    "status": (
        "PENDING: waiting for its send time. PROCESSING: its message is queued or being "
        "sent. COMPLETED: the receiver accepted the message. FAILED: given up, too late "
        "to send, held back by a pause, or out of attempts (failure_reason says which); an "
        "operator may resend it."
    ),
    "occurrence_date": (
        "The day celebrated, in the recipient's calendar (Feb 28 for a Feb 29 birthday "
        "or wedding in a common year)."
    ),
    "target_timestamp_utc": "When the message is due, in UTC.",
    "target_timestamp_local": (
        "The same instant as local wall time with its UTC offset (ISO 8601), such as "
        "2027-03-14T09:00:00-04:00."
    ),
    "target_timezone": "The IANA time zone the send time was computed in.",
    "idempotency_key": (
        "Sent with every attempt as X-Idempotency-Key (and webhook-id): one key per "
        "occurrence (a birthday, an anniversary), unchanged by retries, resends and time "
        "zone changes."
    ),
    "executed_at": "When the receiver accepted the message; null until then.",
    "failure_reason": "Why the event FAILED; empty otherwise.",
    "version": "Bumped by every change of status.",
    "created_at": "When the event was scheduled.",
    "updated_at": "When the event last changed.",
}


class EventSerializer(serializers.ModelSerializer):
    """One scheduled message of a recipient's (a birthday or wedding anniversary), and what became of it."""

    # Attempts after the first, counted by the event's deliveries: the record of
    # attempts (users.selectors.user_events fetches them with the events).
    retry_count = serializers.SerializerMethodField(
        help_text="Delivery attempts after the first at the destination that needed the most; "
        "0 until a first attempt fails."
    )

    def get_retry_count(self, event: Event) -> int:
        return max((d.attempts - 1 for d in event.deliveries.all()), default=0) if event.pk else 0

    class Meta:
        model = Event
        fields = NEXT_EVENT_FIELDS + [
            "executed_at",
            "failure_reason",
            "retry_count",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields
        extra_kwargs = {field: {"help_text": text} for field, text in EVENT_FIELD_HELP.items()}


class NextEventSerializer(serializers.ModelSerializer):
    """A pending event of the recipient's: the next message of its type and when it is due."""

    class Meta:
        model = Event
        fields = NEXT_EVENT_FIELDS
        read_only_fields = fields
        extra_kwargs = {field: {"help_text": EVENT_FIELD_HELP[field]} for field in fields}


class RecipientCleanedField(serializers.Field):
    """A recipient's field parsed by its own cleaner (users.fields, the field of its name)."""

    def to_internal_value(self, data):
        assert self.field_name is not None  # named when bound to its serializer
        try:
            return FIELDS_BY_NAME[self.field_name].cleaned(data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None


@extend_schema_field({"type": "string", "pattern": TIME_OF_DAY_PATTERN, "nullable": True, "example": "10:30"})
class SendTimeField(RecipientCleanedField):
    """A local time of day as "HH:MM" (null for none), by send_time's cleaner (users.validators.clean_send_time)."""

    def to_representation(self, value):
        return value.strftime("%H:%M")


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "pattern": LABEL_PATTERN, "maxLength": LABEL_MAX_LENGTH},
        "maxItems": LABELS_MAX_COUNT,
        "example": ["team:platform", "office:berlin"],
    }
)
class LabelsField(RecipientCleanedField):
    """A recipient's labels as a JSON list of strings, by their cleaner (scheduling.labels.clean_labels)."""

    def to_representation(self, value):
        return list(value)


# --- the person's say (scheduling.celebration) ---


@extend_schema_field(
    {
        "type": "string",
        "pattern": DATE_OF_BIRTH_PATTERN,
        "example": "1990-06-15",
        "description": "YYYY-MM-DD, or --MM-DD for a birthday without its year.",
    }
)
class DateOfBirthField(RecipientCleanedField):
    """A date of birth as YYYY-MM-DD, or a month and day without the year as --MM-DD (users.fields)."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError(["Date of birth must be a date as YYYY-MM-DD, or --MM-DD."])
        if not data.startswith("--"):
            try:
                data = date.fromisoformat(data)
            except ValueError:
                raise serializers.ValidationError(
                    ["Date of birth must be a real date as YYYY-MM-DD, or --MM-DD without the year."]
                ) from None
        return super().to_internal_value(data)

    def to_representation(self, value):
        return value.isoformat() if year_known(value) else month_day(value)


# null (the company default) is in the enum too: OpenAPI 3.0 validators read `nullable` with an enum that way.
_VISIBILITY_SCHEMA = {"type": "string", "enum": [*Visibility.values, None], "nullable": True}


@extend_schema_field(
    {
        "type": "object",
        "properties": {event_type: _VISIBILITY_SCHEMA for event_type in EventType.values},
        "additionalProperties": False,
        "example": {"BIRTHDAY": "private"},
    }
)
class VisibilityField(RecipientCleanedField):
    """The person's own visibility per event type; null: the company default (users.fields.clean_visibility)."""

    def get_attribute(self, instance):
        return _choices_of(instance)

    def to_representation(self, value):
        return {event_type: value.get(event_type) for event_type in EventType.values}


def _choices_of(user: User) -> dict[str, str]:
    # Prefetched by users.selectors.user_list; read for a user just created or changed.
    if not user.pk:
        return {}
    return {choice.event_type: choice.visibility for choice in user.celebration_choices.all()}


# --- end of the person's say ---


def _described(name: str) -> dict[str, Any]:
    """The API's help text of a recipient's field, and whether it is required, as users.fields declares them."""
    field = FIELDS_BY_NAME[name]
    return {"help_text": field.help_text, "required": field.required}


# Field-level rules that can run on their own (none checked in the recipient's time
# zone), so a request with one field that does not even parse still hears about
# every other bad field in the same reply.
_STANDALONE_RULES = [field for field in RECIPIENT_FIELDS if field.column and not field.in_zone]
# What the API shows of a recipient after the fields a client writes, read-only as its id.
_SHOWN_AFTER = [
    *PAUSE_RECORD_HELP,
    "email_undeliverable_at",
    "email_undeliverable_reason",
    "visibility_in_force",
    "next_event",
    "next_events",
    "version",
    "created_at",
    "updated_at",
]


class UserSerializer(serializers.ModelSerializer):
    """A recipient of the birthday message (and, with a wedding date, the anniversary one)."""

    # Parses and renders users; the rules themselves, and the help texts, live in users.fields.
    first_name = StrictCharField(max_length=1000, trim_whitespace=False, **_described("first_name"))
    last_name = StrictCharField(max_length=1000, trim_whitespace=False, **_described("last_name"))
    timezone = StrictCharField(max_length=200, **_described("timezone"))
    send_time = SendTimeField(allow_null=True, **_described("send_time"))
    external_id = StrictCharField(
        max_length=1000,
        allow_null=True,
        allow_blank=True,
        trim_whitespace=False,
        **_described("external_id"),
    )
    labels = LabelsField(allow_null=True, **_described("labels"))
    language = StrictCharField(
        max_length=LANGUAGE_MAX_LENGTH, allow_null=True, allow_blank=True, **_described("language")
    )
    # A string read as given: the shared rule (users.validators.clean_email) trims, checks and normalises it.
    email = StrictCharField(
        max_length=1000, allow_null=True, allow_blank=True, trim_whitespace=False, **_described("email")
    )
    paused = StrictBooleanField(**_described("paused"))
    # mentions (users.fields.MENTION_FIELDS)
    slack_user_id = StrictCharField(
        max_length=1000, allow_null=True, allow_blank=True, **_described("slack_user_id")
    )
    discord_user_id = StrictCharField(
        max_length=1000, allow_null=True, allow_blank=True, **_described("discord_user_id")
    )
    teams_user_id = StrictCharField(
        max_length=1000, allow_null=True, allow_blank=True, **_described("teams_user_id")
    )
    mention_consent = StrictBooleanField(allow_null=True, **_described("mention_consent"))
    # --- the person's say ---
    date_of_birth = DateOfBirthField(**_described("date_of_birth"))
    hide_age = StrictBooleanField(**_described("hide_age"))
    visibility = VisibilityField(**_described("visibility"))
    visibility_in_force = serializers.SerializerMethodField(
        help_text="The visibility each event type of theirs has now: their own choice, else the company "
        "default, else public."
    )
    # --- end of the person's say ---
    next_event = serializers.SerializerMethodField(
        help_text="The pending birthday event: the next birthday message and when it is due."
    )
    next_events = serializers.SerializerMethodField(
        help_text=(
            "Every pending event, soonest first: the next birthday and, for a recipient "
            "with an anniversary_date, the next wedding anniversary."
        )
    )

    class Meta:
        model = User
        fields = ["id", *(field.name for field in RECIPIENT_FIELDS), *_SHOWN_AFTER]
        read_only_fields = ["id", *_SHOWN_AFTER]
        extra_kwargs = {
            # The fields built from the model's (the dates); the declared ones above take the same.
            **{field.name: _described(field.name) for field in RECIPIENT_FIELDS},
            "id": {"help_text": "The recipient's id, assigned on creation."},
            **{name: {"help_text": text} for name, text in PAUSE_RECORD_HELP.items()},
            "version": {
                "help_text": "Bumped by every change to the recipient's fields; the ETag carries it."
            },
            "email_undeliverable_at": {
                "help_text": "When mail to `email` was refused for good (a 5xx at RCPT, a hard bounce, a "
                "complaint); null: it is mailed. Cleared when `email` changes."
            },
            "email_undeliverable_reason": {"help_text": "What refused it, as the relay or the ESP said it."},
            "created_at": {"help_text": "When the recipient was created."},
            "updated_at": {"help_text": "When the recipient was last changed."},
        }

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": ["Expected a JSON object with the user's fields."]}
            )
        # A misspelt field would otherwise be dropped silently and the request
        # "succeed" without doing what the client meant.
        errors: dict[str, Any] = {field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))}
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            assert isinstance(exc.detail, dict)  # a serializer's errors are by field
            errors.update(exc.detail)
        if not errors:
            return attrs
        for field in _STANDALONE_RULES:
            if field.name in errors or not isinstance(data.get(field.name), str):
                continue
            try:
                field.cleaned(data[field.name])
            except DjangoValidationError as exc:
                errors[field.name] = exc.messages
        raise serializers.ValidationError(errors)

    def validate(self, attrs):
        merged = {field: attrs.get(field, getattr(self.instance, field, None)) for field in USER_FIELDS}
        try:
            cleaned = clean_user_fields(merged)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        # `paused` is no field of the shared rules: the field itself checked it.
        return {field: cleaned.get(field, value) for field, value in attrs.items()}

    @staticmethod
    def _pending(user: User) -> list[Event]:
        # Prefetched by users.selectors.user_list, or just created (events_create_first).
        pending = getattr(user, "pending_events", None)
        if pending is None:
            pending = list(user.events.filter(status=Event.Status.PENDING))
        return sorted(pending, key=lambda event: event.target_timestamp_utc)

    # Still the birthday alone, as it was before there were other event types:
    # the clients that read it are not handed an anniversary instead.
    @extend_schema_field(NextEventSerializer(allow_null=True))
    def get_next_event(self, user: User):
        birthday = next((e for e in self._pending(user) if e.event_type == EventType.BIRTHDAY), None)
        return NextEventSerializer(birthday).data if birthday else None

    @extend_schema_field(
        {
            "type": "object",
            "properties": {t: {"type": "string", "enum": [*Visibility.values]} for t in EventType.values},
        }
    )
    def get_visibility_in_force(self, user: User):
        choices = _choices_of(user)
        # Read once per response (a list's page shares it), not once per recipient.
        root = self.root
        defaults = getattr(root, "_celebration_defaults", None)
        if defaults is None:
            defaults = root._celebration_defaults = celebration_defaults()  # type: ignore[attr-defined]
        return {t: visibility_of(choices.get(t), default=defaults.get(t)) for t in EventType.values}

    @extend_schema_field(NextEventSerializer(many=True))
    def get_next_events(self, user: User):
        return NextEventSerializer(self._pending(user), many=True).data


class PersonalLinkSerializer(serializers.Serializer):
    """A link to the person's own page, as issued (the API's answer only: nothing reads it)."""

    url = serializers.URLField(help_text="The link; in this answer only.")
    expires_at = serializers.DateTimeField(help_text="When it stops opening the page.")
