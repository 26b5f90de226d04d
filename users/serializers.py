from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.fields import StrictBooleanField
from scheduling.labels import LABEL_MAX_LENGTH, LABEL_PATTERN, LABELS_MAX_COUNT, clean_labels
from scheduling.languages import LANGUAGE_MAX_LENGTH, clean_language
from scheduling.models import Event, EventType
from users.models import User
from users.services import USER_FIELDS
from users.validators import (
    EXTERNAL_ID_MAX_LENGTH,
    SEND_TIME_PATTERN,
    clean_external_id,
    clean_name,
    clean_send_time,
    clean_timezone,
    clean_user_fields,
)

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


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


@extend_schema_field({"type": "string", "pattern": SEND_TIME_PATTERN, "nullable": True, "example": "10:30"})
class SendTimeField(serializers.Field):
    """A local time of day as "HH:MM" (null for none), by users.validators.clean_send_time."""

    def to_internal_value(self, data):
        try:
            return clean_send_time(data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None

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
class LabelsField(serializers.Field):
    """A recipient's labels as a JSON list of strings, by scheduling.labels.clean_labels."""

    def to_internal_value(self, data):
        try:
            return clean_labels(data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.messages) from None

    def to_representation(self, value):
        return list(value)


# Field-level rules that can run on their own, so a request with one field that
# does not even parse still hears about every other bad field in the same reply.
_STANDALONE_RULES: dict[str, Callable[[str], object]] = {
    "first_name": lambda value: clean_name(value, field_label="First name"),
    "last_name": lambda value: clean_name(value, field_label="Last name"),
    "timezone": clean_timezone,
    "external_id": clean_external_id,
    "language": clean_language,
}


class UserSerializer(serializers.ModelSerializer):
    """A recipient of the birthday message (and, with a wedding date, the anniversary one)."""

    # Parses and renders users; the rules themselves live in users.validators.
    first_name = StrictCharField(
        max_length=1000,
        trim_whitespace=False,
        help_text="Surrounding whitespace is trimmed; 1 to 100 characters must remain.",
    )
    last_name = StrictCharField(
        max_length=1000,
        trim_whitespace=False,
        help_text="Surrounding whitespace is trimmed; 1 to 100 characters must remain.",
    )
    timezone = StrictCharField(
        max_length=200,
        help_text=(
            "An IANA time zone name, such as America/New_York; the messages go out at the "
            f"send_time ({settings.EVENT_SEND_TIME} unless the recipient has their own) there. "
            "UTC offsets such as +05:00 are refused: they do not follow daylight saving time."
        ),
    )
    send_time = SendTimeField(
        required=False,
        allow_null=True,
        help_text=(
            "Optional: the recipient's own local send time, HH:MM from 00:00 to 23:59 (such as "
            f"10:30); null means the default, {settings.EVENT_SEND_TIME}. A time that does not "
            "exist on the day (inside a DST gap) moves forward by the gap; one that happens "
            "twice takes the first. A change moves the pending events' send times and keeps "
            "their occurrence and idempotency key. A PUT without it leaves it as it is."
        ),
    )
    external_id = StrictCharField(
        max_length=1000,
        required=False,
        allow_null=True,
        allow_blank=True,
        trim_whitespace=False,
        help_text=(
            "Optional: the client's own id for the recipient, held by no other recipient "
            "(400 if another holds it). Surrounding whitespace is trimmed; 1 to "
            f"{EXTERNAL_ID_MAX_LENGTH} characters must remain, or none: null or an empty "
            "string means the recipient has none. A PUT without it leaves it as it is. "
            "Find a recipient by it with `GET /api/v1/users/?external_id=…`."
        ),
    )
    labels = LabelsField(
        required=False,
        allow_null=True,
        help_text=(
            "Optional: a few labels a destination's audience chooses recipients by, such as "
            '["team:platform", "office:berlin", "remote"]: lowercase letters, digits and . _ -, '
            f"optionally one key:value, at most {LABEL_MAX_LENGTH} characters each and "
            f"{LABELS_MAX_COUNT} in all; taken in any case and stored lowercase, sorted, without "
            "repeats. null or [] means none. A change applies to the occurrences claimed after it; "
            "one already being sent is not touched. A PUT without it leaves it as it is. Filter "
            "the list by it with `GET /api/v1/users/?label=team:platform`."
        ),
    )
    language = StrictCharField(
        max_length=1000,
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text=(
            "Optional: the language of the recipient's messages, a BCP 47 tag such as de, pt-BR or "
            f"zh-Hant-TW (at most {LANGUAGE_MAX_LENGTH} characters; stored in the usual case, "
            "pt-br becomes pt-BR). A message uses the event type's template in that language, else "
            "in its base language (pt-BR, then pt), else the type's default. null or an empty "
            "string means none: the default. A PUT without it leaves it as it is."
        ),
    )
    paused = StrictBooleanField(
        required=False,
        help_text=(
            "Optional: true holds back every message of the recipient's from now on: an occurrence "
            'whose send time comes while paused is not sent but FAILED with the reason "recipient '
            'paused", and the next one is scheduled. false resumes: the next occurrence whose send '
            "time has not passed is sent. Who paused or resumed, and when, are recorded (paused_by, "
            "paused_at, resumed_by, resumed_at). Omitted: unchanged (false on creation)."
        ),
    )
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
        fields = [
            "id",
            "first_name",
            "last_name",
            "date_of_birth",
            "timezone",
            "external_id",
            "anniversary_date",
            "send_time",
            "labels",
            "language",
            "paused",
            "paused_at",
            "paused_by",
            "resumed_at",
            "resumed_by",
            "next_event",
            "next_events",
            "version",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "id",
            "paused_at",
            "paused_by",
            "resumed_at",
            "resumed_by",
            "next_event",
            "next_events",
            "version",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {
            "id": {"help_text": "The recipient's id, assigned on creation."},
            "date_of_birth": {
                "help_text": (
                    "A real date (YYYY-MM-DD) from 1900-01-01 up to today in the "
                    "recipient's own time zone. A Feb 29 birthday is celebrated on "
                    "Feb 28 in common years."
                )
            },
            "anniversary_date": {
                "help_text": (
                    "Optional: the wedding date, by the same rules as date_of_birth. With it "
                    "the recipient also gets a wedding anniversary message every year, at the "
                    "same local time as the birthday one (a Feb 29 wedding on Feb 28 in common "
                    "years); null removes it. A PUT without it leaves it as it is."
                )
            },
            "paused_at": {"help_text": "When the latest pause began; null if never paused."},
            "paused_by": {
                "help_text": "Who made the latest pause (an operator's or API account's username)."
            },
            "resumed_at": {"help_text": "When the latest pause ended; null while paused or if never paused."},
            "resumed_by": {"help_text": "Who ended the latest pause."},
            "version": {
                "help_text": "Bumped by every change to the recipient's fields; the ETag carries it."
            },
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
        for field, rule in _STANDALONE_RULES.items():
            if field in errors or not isinstance(data.get(field), str):
                continue
            try:
                rule(data[field])
            except DjangoValidationError as exc:
                errors[field] = exc.messages
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

    @extend_schema_field(NextEventSerializer(many=True))
    def get_next_events(self, user: User):
        return NextEventSerializer(self._pending(user), many=True).data
