from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from scheduling.models import Event
from users.models import User
from users.validators import clean_name, clean_timezone, clean_user_fields

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


class EventSerializer(serializers.ModelSerializer):
    # Attempts after the first, counted by the event's delivery: the one record
    # of attempts (users.selectors.user_events joins it in the same query).
    retry_count = serializers.SerializerMethodField()

    def get_retry_count(self, event: Event) -> int:
        delivery = getattr(event, "delivery", None)
        return max(delivery.attempts - 1, 0) if delivery is not None else 0

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


class NextEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = Event
        fields = NEXT_EVENT_FIELDS
        read_only_fields = fields


class StrictCharField(serializers.CharField):
    """A CharField that refuses numbers and booleans instead of turning them into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


# Field-level rules that can run on their own, so a request with one field that
# does not even parse still hears about every other bad field in the same reply.
_STANDALONE_RULES = {
    "first_name": lambda value: clean_name(value, field_label="First name"),
    "last_name": lambda value: clean_name(value, field_label="Last name"),
    "timezone": clean_timezone,
}


class UserSerializer(serializers.ModelSerializer):
    """Parses and renders users; the rules themselves live in users.validators."""

    first_name = StrictCharField(max_length=1000, trim_whitespace=False)
    last_name = StrictCharField(max_length=1000, trim_whitespace=False)
    timezone = StrictCharField(max_length=200)
    next_event = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = [
            "id",
            "first_name",
            "last_name",
            "date_of_birth",
            "timezone",
            "next_event",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "next_event", "created_at", "updated_at"]

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": ["Expected a JSON object with the user's fields."]}
            )
        # A misspelt field would otherwise be dropped silently and the request
        # "succeed" without doing what the client meant.
        errors = {field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))}
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
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
        merged = {
            field: attrs.get(field, getattr(self.instance, field, None))
            for field in ("first_name", "last_name", "date_of_birth", "timezone")
        }
        try:
            cleaned = clean_user_fields(merged)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        return {field: cleaned[field] for field in attrs}

    def get_next_event(self, user: User):
        pending = getattr(user, "pending_events", None)
        if pending is None:
            pending = list(user.events.filter(status=Event.Status.PENDING))
        return NextEventSerializer(pending[0]).data if pending else None

