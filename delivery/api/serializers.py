"""The destinations API's shapes. Validation of the values is the service's (delivery.destinations.services)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from config.fields import NOT_BLANK, StrictBooleanField, StrictCharField
from delivery.credentials.signing_secrets import PREFIX as SECRET_PREFIX
from delivery.destinations.fields import EDITABLE_FIELDS, SETTINGS, URL_MAX_LENGTH
from delivery.models import (
    DIGEST_DAYS_AHEAD_MAX,
    RECOVERABLE_STATUSES,
    Destination,
    DestinationFormat,
    DestinationSecret,
    DigestLanguage,
    EndpointState,
    Recovery,
    Weekday,
    Weekend,
)
from delivery.rules import failure_causes as failures
from delivery.rules.digest_calendar import next_digest_local
from delivery.upcoming.selectors import PAGE_SIZE, PAGE_SIZE_MAX, UPCOMING_DAYS_MAX
from scheduling.event_types import EventType
from scheduling.labels import LABEL_MAX_LENGTH, LABEL_PATTERN, LABELS_MAX_COUNT, clean_labels
from scheduling.times import TIME_OF_DAY_PATTERN, time_of_day

# What the document says of a receiver URL: http or https in any case (the server normalises it).
# http(s) for a webhook; smtps, smtp or smtp+plain for an email destination's relay.
URL_PATTERN = r"^([Hh][Tt][Tt][Pp][Ss]?|[Ss][Mm][Tt][Pp]([Ss]|\+[Pp][Ll][Aa][Ii][Nn])?)://"
# A signing secret as given on create: the prefix and base64 (blank: the server makes one).
# Blank ("": the server makes one) is its field's allow_blank, which the document states beside this (a oneOf).
SECRET_PATTERN = rf"^{SECRET_PREFIX}[A-Za-z0-9+/]+={{0,2}}$"


@extend_schema_field(
    {
        "type": "number",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": settings.WEBHOOK_TIMEOUT.total_seconds(),
        "nullable": True,
    }
)
class SecondsField(serializers.FloatField):
    """A duration as a number of seconds, as WEBHOOK_TIMEOUT is written."""

    # The bounds a timedelta can hold comfortably; the service then holds it to WEBHOOK_TIMEOUT.
    LONGEST = 86400.0

    def to_internal_value(self, data):
        seconds = super().to_internal_value(data)
        if not 0 <= seconds <= self.LONGEST:
            raise serializers.ValidationError(f"A number of seconds from 0 to {self.LONGEST:g}.")
        return timedelta(seconds=seconds)

    # DRF's FloatField represents a float as a float; djangorestframework-stubs say str.
    def to_representation(self, value: timedelta | float) -> float:  # type: ignore[override]
        # A timedelta from the model; FloatField's signature takes the float it would be.
        return value.total_seconds() if isinstance(value, timedelta) else value


class DestinationSecretSerializer(serializers.ModelSerializer):
    class Meta:
        model = DestinationSecret
        fields = ["hint", "created_at", "expires_at"]
        extra_kwargs = {
            "hint": {
                "help_text": "The prefix and the first characters: enough to tell secrets apart, never to sign."
            },
            "expires_at": {
                "help_text": "Null: in force. Else it signs beside the newer one until then (rotation)."
            },
        }


@extend_schema_field({"type": "string", "pattern": URL_PATTERN, "maxLength": URL_MAX_LENGTH})
class ReceiverUrlField(serializers.CharField):
    """A receiver URL: read as its redacted form (the host, never the token: delivery.credentials.receiver_urls), written
    whole. The whole URL is read only with POST .../reveal-url/."""

    def get_attribute(self, instance):
        return instance.url_display


@extend_schema_field({"type": "string", "pattern": TIME_OF_DAY_PATTERN, "nullable": True, "example": "09:00"})
class DigestTimeField(serializers.TimeField):
    """HH:MM and nothing else, by the one rule (scheduling.times.time_of_day): OpenAPI's `format: time`
    ("09:00:00Z") would describe what is refused, and strptime would take "9:5"."""

    def to_internal_value(self, value: Any) -> Any:
        # Not HH:MM: as given, for the destination's cleaner to say so in the words a send time gets.
        return time_of_day(value) or value


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "pattern": LABEL_PATTERN, "maxLength": LABEL_MAX_LENGTH},
        "maxItems": LABELS_MAX_COUNT,
        "example": ["team:platform"],
    }
)
class LabelsField(serializers.Field):
    """Labels as given, to the service's cleaner (scheduling.labels.clean_labels, a recipient's rule): not a
    ListField of CharField, which would store [1] as ["1"] where a recipient's [1] is refused."""

    def to_internal_value(self, data: Any) -> Any:
        return data

    def to_representation(self, value: Any) -> list[str]:
        return list(value)


@extend_schema_field({"type": "string", "pattern": SECRET_PATTERN})
class SigningSecretField(serializers.CharField):
    """A signing secret an operator gives: the document states its prefix; the service judges the rest.

    Taken exactly as the document's pattern says: white space around it is refused, not trimmed, so that
    what the document allows and what the server accepts are one set.
    """

    def __init__(self, **kwargs):
        kwargs["trim_whitespace"] = False
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        if value != value.strip():
            raise serializers.ValidationError("A signing secret has no white space around it.")
        return value


class DestinationSerializer(serializers.ModelSerializer):
    """A receiver of greetings. Its signing secrets appear as hints only; the secret itself is in the
    answer to the create and rotate-secret requests, once."""

    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=EventType.choices),
        required=False,
        allow_empty=True,
    )
    audience_labels = LabelsField(required=False)
    excluded_labels = LabelsField(required=False)
    message_overrides = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False),
        required=False,
    )
    format = serializers.ChoiceField(choices=DestinationFormat.choices, required=False)
    mention_recipient = StrictBooleanField(required=False)
    timeout = SecondsField(required=False, allow_null=True)
    digest_time = DigestTimeField(format="%H:%M", required=False, allow_null=True)
    digest_timezone = serializers.CharField(required=False, allow_blank=True)
    weekend = serializers.ChoiceField(choices=Weekend.choices, required=False)
    digest_days_ahead = serializers.IntegerField(min_value=0, max_value=DIGEST_DAYS_AHEAD_MAX, required=False)
    digest_weekday = serializers.ChoiceField(choices=Weekday.choices, allow_null=True, required=False)
    digest_language = serializers.ChoiceField(choices=DigestLanguage.choices, required=False)
    next_digest_date = serializers.DateField(
        read_only=True,
        allow_null=True,
        help_text="The local date of its next digest (a weekly one's: its next weekday in a week not yet "
        "built); null without a digest_time.",
    )
    next_digest_at = serializers.DateTimeField(
        read_only=True,
        allow_null=True,
        help_text="When its next digest is due (UTC); null without a digest_time.",
    )
    next_digest_local = serializers.SerializerMethodField(
        help_text="When its next digest is due in digest_timezone, with that zone's offset then "
        "(2026-11-30T09:30:00+01:00): the instant next_digest_at is, as the destination's people read it; "
        "null without a digest_time. The next digest that will be built: never a date whose digest was built "
        "already, whatever its time was moved to.",
    )
    url = ReceiverUrlField(max_length=URL_MAX_LENGTH)
    secret = SigningSecretField(
        write_only=True,
        required=False,
        allow_blank=True,
        trim_whitespace=True,
        help_text="On create only: a signing secret to use (whsec_ + base64 of 24 to 64 bytes); left out, the "
        "server makes one. Either way it is in this answer only. A slack, discord or teams destination is not "
        "signed (its service checks no signature; its URL is the credential): it gets none, and one given is "
        "refused (400).",
    )
    secrets = DestinationSecretSerializer(
        many=True, read_only=True, help_text="Its signing secrets, as hints."
    )
    smtp_password = serializers.CharField(
        write_only=True,
        required=False,
        allow_blank=True,
        allow_null=True,
        trim_whitespace=False,
        max_length=500,
    )
    smtp_password_set = serializers.SerializerMethodField(
        help_text="email only: whether the relay's password is set (it is never shown)."
    )
    paused = serializers.SerializerMethodField(
        help_text="Whether an operator paused it (its endpoint's pause)."
    )
    endpoint_state = serializers.SerializerMethodField(
        help_text="Its URL's health: HEALTHY, FAILING, PAUSED or GONE (its service answered that the "
        "destination no longer exists: nothing is sent to it until resumed or given a new URL)."
    )

    class Meta:
        model = Destination
        # What an operator may set is the declared settings' list (delivery.destinations.fields), then what
        # is only read.
        fields = [
            "id",
            *EDITABLE_FIELDS,
            "next_digest_date",
            "next_digest_at",
            "next_digest_local",
            "secret",
            "secrets",
            "smtp_password_set",
            "paused",
            "endpoint_state",
            "created_by",
            "updated_by",
            "created_at",
            "updated_at",
            "version",
        ]
        read_only_fields = ["created_by", "updated_by", "created_at", "updated_at", "version"]
        extra_kwargs = {
            "version": {"help_text": "Bumped by every change of its settings or secrets; the ETag."},
        }
        # The service validates and reports each field; the model's unique validators would only read twice.
        validators: list[Any] = []

    def get_fields(self):
        fields = super().get_fields()
        # Each setting's field, declared here or made from the model, says what the setting's declaration
        # says (delivery.destinations.fields).
        for name, setting in SETTINGS.items():
            fields[name].help_text = setting.help
        # Not the unique check (the service's), and a name of white space alone is blank: the document says so.
        fields["name"].validators = [
            *(v for v in fields["name"].validators if not hasattr(v, "queryset")),
            NOT_BLANK,
        ]
        if self.instance is not None:
            fields["url"].required = False  # a PUT of what GET answered keeps the URL it cannot see
        return fields

    def validate_url(self, value: str) -> str:
        return value

    @extend_schema_field({"type": "string", "format": "date-time", "nullable": True})
    def get_next_digest_local(self, destination: Destination) -> str | None:
        local = next_digest_local(destination=destination)
        return local.isoformat() if local is not None else None

    def get_smtp_password_set(self, destination: Destination) -> bool:
        return bool(destination.smtp_password_ciphertext)

    def get_paused(self, destination: Destination) -> bool:
        return self.get_endpoint_state(destination) == EndpointState.PAUSED

    def get_endpoint_state(self, destination: Destination) -> str:
        endpoints = self.context.get("endpoints")
        endpoint = endpoints.get(destination.url_key) if endpoints is not None else None
        return endpoint.state if endpoint is not None else EndpointState.HEALTHY

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": ["Expected a JSON object with the destination's fields."]}
            )
        writable = {name for name, field in self.fields.items() if not field.read_only}
        errors = {field: ["Unknown field."] for field in sorted(set(data) - writable)}
        if self.instance is not None and "secret" in data:
            errors["secret"] = ["A secret is changed with POST .../rotate-secret/."]
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            assert isinstance(exc.detail, dict)  # a serializer's errors are by field
            errors.update({field: _messages(detail) for field, detail in exc.detail.items()})
        if errors:
            raise serializers.ValidationError(errors)
        if self.instance is not None and attrs.get("url") == self.instance.url_display:
            del attrs["url"]  # the redacted form GET answered, sent back unchanged: the URL stays
        return attrs


class DestinationUpdateSerializer(DestinationSerializer):
    """What a PUT or PATCH of a destination takes: its settings, not its secret (rotate-secret changes that)."""

    class Meta(DestinationSerializer.Meta):
        fields = [name for name in DestinationSerializer.Meta.fields if name != "secret"]


def _messages(detail) -> list:
    """A field's errors as a list of messages: a list's are by item ({"0": [...]}), said as "Item 1: ...";
    an object's by key ({"BIRTHDAY": [...]}), said as "BIRTHDAY: ..."."""
    if isinstance(detail, dict):
        return [
            f"Item {int(key) + 1}: {message}" if str(key).isdigit() else f"{key}: {message}"
            for key, messages in detail.items()
            for message in messages
        ]
    return detail


class RevealedUrlSerializer(serializers.Serializer):
    """The answer to reveal-url: the destination's whole receiver URL."""

    url = serializers.CharField(help_text="The whole receiver URL, token and all: a credential.")


class NewSecretSerializer(serializers.Serializer):
    """The answer to a rotation: the new secret, this once, and what now signs."""

    secret = serializers.CharField(help_text="The new signing secret. Shown now and never again.")
    secrets = DestinationSecretSerializer(many=True, help_text="Every secret now signing, as hints.")


class RotateSecretSerializer(serializers.Serializer):
    secret = SigningSecretField(
        required=False,
        allow_blank=True,
        help_text="A signing secret to use (whsec_ + base64 of 24 to 64 bytes); left out, the server makes one.",
    )

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = {field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))}
        if unknown:
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


# --- recoveries --------------------------------------------------------------------------


class AwareDateTimeField(serializers.DateTimeField):
    """An instant with its UTC offset: a naive one would be read in some zone the caller did not choose."""

    def enforce_timezone(self, value):
        if timezone.is_naive(value):
            raise serializers.ValidationError(
                "Give the instant with its UTC offset (2026-11-24T08:00:00+01:00, or Z for UTC)."
            )
        return super().enforce_timezone(value)


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string", "enum": list(RECOVERABLE_STATUSES)},
        "minItems": 1,
        "uniqueItems": True,
    }
)
class RecoverableStatesField(serializers.ListField):
    """The states asked for, as given: the service judges them and says why in its own words
    (delivery.actions.recovery.recovery_values_clean); the document states the same rules."""

    def __init__(self, **kwargs):
        super().__init__(child=serializers.CharField(), allow_empty=True, **kwargs)


class RecoveryRequestSerializer(serializers.Serializer):
    """What to recover: the states, the window and whether only to count. The values are the service's to judge."""

    states = RecoverableStatesField(
        help_text="DEAD, DELIVERED or both, each once: the states of the deliveries to send again.",
    )
    since = AwareDateTimeField(
        help_text="The window's start, included: deliveries that reached their state at or after it."
    )
    until = AwareDateTimeField(
        help_text="The window's end, excluded (and never past this request: what ends afterwards is not taken)."
    )
    dry_run = serializers.BooleanField(
        default=False, help_text="true: only count what would be sent again (200, nothing recorded)."
    )

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown: dict[str, Any] = {
            field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))
        }
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            assert isinstance(exc.detail, dict)  # a serializer's errors are by field
            # A list's errors said as every other list field's are: "Item 1: ...".
            unknown.update({field: _messages(detail) for field, detail in exc.detail.items()})
            raise serializers.ValidationError(unknown) from None
        if unknown:
            raise serializers.ValidationError(unknown)
        return attrs


class RecoveryPreviewSerializer(serializers.Serializer):
    """The answer to a dry run: how many deliveries the recovery would send again now."""

    dry_run = serializers.BooleanField(help_text="Always true: nothing was recorded.")
    count = serializers.IntegerField(
        help_text="The deliveries a recovery with these values would queue again."
    )
    states = serializers.ListField(child=serializers.CharField())
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()


class RecoverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Recovery
        fields = [
            "id",
            "destination",
            "states",
            "since",
            "until",
            "status",
            "total",
            "done",
            "skipped",
            "batches",
            "requested_by",
            "requested_at",
            "finished_at",
            "updated_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "status": {"help_text": "PENDING (waiting for a worker), RUNNING, FINISHED or CANCELLED."},
            "total": {"help_text": "The deliveries counted when it was asked for: what was confirmed."},
            "done": {"help_text": "Queued again so far, each under its own idempotency key."},
            "skipped": {
                "help_text": "Counted but not queued again: gone since (recipient erased, event pruned), "
                "sent again meanwhile, or the recipient no longer has that date. FINISHED: done + "
                "skipped = total."
            },
            "batches": {
                "help_text": "The workers' batches so far (DELIVERY_RECOVERY_BATCH deliveries each)."
            },
        }


# --- test messages -----------------------------------------------------------------------


class PingResultSerializer(serializers.Serializer):
    """What the destination answered a test message. A receiver's error is an answer too (ok false)."""

    status_code = serializers.IntegerField(
        allow_null=True, help_text="The receiver's HTTP status; null when it gave none (see error)."
    )
    ok = serializers.BooleanField(
        help_text="The receiver accepted it (2xx), as a delivery would count delivered."
    )
    latency_ms = serializers.IntegerField(
        help_text="Milliseconds from the start of the request to the answer."
    )
    body_start = serializers.CharField(
        allow_blank=True, help_text="The first 500 bytes of the answer's body, decoded as UTF-8."
    )
    error = serializers.CharField(
        allow_blank=True,
        help_text="Why it was not accepted: the status's reason, a timeout, a connection error, or the refusal of "
        "the destination's address (then no request was made); empty when ok.",
    )
    refused = serializers.BooleanField(
        help_text="No request was made: the destination's address is one the workers refuse too."
    )
    message_id = serializers.CharField(
        help_text="Its webhook-id (and X-Idempotency-Key): test- and 32 hex digits, never an event's."
    )


class DestinationHealthSerializer(serializers.Serializer):
    """A destination's health (delivery.destinations.selectors.DestinationHealth): what the console's destinations page shows."""

    id = serializers.IntegerField(source="destination.pk")
    name = serializers.CharField(source="destination.name")
    condition = serializers.CharField(
        source="condition.level",
        help_text="failing, degraded, paused, ok, idle (nothing sent yet) or disabled (delivery.rules.conditions).",
    )
    condition_label = serializers.CharField(source="condition.label")
    reason = serializers.CharField(source="condition.reason")
    needs_attention = serializers.BooleanField(source="condition.needs_attention")
    endpoint_state = serializers.CharField(help_text="Its URL's endpoint: HEALTHY, FAILING or PAUSED.")
    dead_last_hour = serializers.IntegerField()
    dead_last_day = serializers.IntegerField()
    last_failure_at = serializers.DateTimeField(
        allow_null=True, help_text="Its latest DEAD delivery of the last 7 days."
    )
    last_failure_cause = serializers.CharField(
        help_text='"http_400", "timeout", "connection" ... ("" if none).'
    )
    last_failure = serializers.CharField(source="last_failure_label", help_text="The cause in words.")
    last_failure_hint = serializers.CharField(
        help_text='What the cause means and what fixes it ("" if none).'
    )
    last_failure_status = serializers.IntegerField(allow_null=True)
    last_delivered_at = serializers.DateTimeField(allow_null=True)


class FailureGroupSerializer(serializers.Serializer):
    """One destination's dead deliveries of one cause, not acknowledged (delivery.selectors.FailureGroup)."""

    destination = serializers.IntegerField(source="destination_id")
    destination_name = serializers.CharField()
    cause = serializers.CharField()
    cause_label = serializers.CharField(source="label")
    cause_hint = serializers.CharField(source="hint", help_text="What the cause means and what fixes it.")
    count = serializers.IntegerField()
    count_last_hour = serializers.IntegerField()
    first_seen = serializers.DateTimeField()
    last_seen = serializers.DateTimeField()
    examples = serializers.ListField(
        source="example_ids", child=serializers.UUIDField(), help_text="The latest deliveries, newest first."
    )


class FailureGroupActionSerializer(serializers.Serializer):
    destination = serializers.PrimaryKeyRelatedField(queryset=Destination.objects.all())
    cause = serializers.CharField(max_length=32)
    through = AwareDateTimeField(
        required=False, help_text="Acknowledge: the failures given up until then (default: now)."
    )

    def validate_cause(self, value: str) -> str:
        if not failures.is_cause(value):
            raise serializers.ValidationError("Unknown cause.")
        return value

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = {field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))}
            if unknown:
                raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)


class FailureGroupResendSerializer(serializers.Serializer):
    resent = serializers.IntegerField()
    refused = serializers.IntegerField()
    remaining = serializers.IntegerField()


class UpcomingQuerySerializer(serializers.Serializer):
    """The upcoming list's query: each value checked here, a 400 naming the one that is not."""

    days = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=UPCOMING_DAYS_MAX,
        help_text="How many days ahead (default 14).",
    )
    destination = serializers.IntegerField(
        required=False, min_value=1, help_text="Only what this destination will send, and why not."
    )
    # Named as the query parameter; DRF's metaclass takes declared fields off the class, so it does not
    # shadow Field.label at run time, which the stubs cannot know.
    label = serializers.CharField(  # type: ignore[assignment]
        required=False, max_length=LABEL_MAX_LENGTH, help_text="Only recipients holding it (a label's rule)."
    )
    type = serializers.ChoiceField(
        choices=EventType.choices, required=False, help_text="Only this event type."
    )
    cursor = serializers.CharField(
        required=False, max_length=80, help_text="The `next_cursor` of the page before."
    )
    limit = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=PAGE_SIZE_MAX,
        help_text=f"Occurrences per page (default {PAGE_SIZE}).",
    )

    def validate_label(self, value: str) -> str:
        # The recipients' one rule for a label (scheduling.labels), as every door reads it.
        try:
            (label,) = clean_labels([value])
        except (DjangoValidationError, ValueError) as exc:
            raise serializers.ValidationError(
                "A label such as team:platform (lowercase, no spaces)."
            ) from exc
        return label


class UpcomingPlacementSerializer(serializers.Serializer):
    destination = serializers.IntegerField(source="destination_id")
    destination_name = serializers.CharField()
    sent_as = serializers.SerializerMethodField(help_text="A message of its own, or a line of a digest.")
    digest_date = serializers.DateField(allow_null=True, help_text="The digest's local date (digests only).")
    at = serializers.DateTimeField(help_text="When it is sent, in UTC.")
    at_local = serializers.SerializerMethodField(help_text="The same instant in `timezone`, with its offset.")
    timezone = serializers.CharField(
        help_text="The destination's zone for a digest, the recipient's otherwise."
    )
    text = serializers.CharField(help_text="The message as it would be rendered now, or the digest's line.")
    language = serializers.CharField(help_text="The template's language; empty: the type's default.")
    default_language = serializers.BooleanField(
        help_text="The recipient has a language with no template in it: the default is used."
    )
    overridden = serializers.BooleanField(help_text="The destination's own text replaces the templates'.")

    def get_sent_as(self, placement) -> str:
        return "digest" if placement.digest else "message"

    def get_at_local(self, placement) -> str:
        return placement.at_local.isoformat()


class UpcomingLeftOutSerializer(serializers.Serializer):
    destination = serializers.IntegerField(
        source="destination_id", allow_null=True, help_text="None: anywhere."
    )
    destination_name = serializers.CharField()
    reason = serializers.CharField(
        help_text="A code: recipient_paused, type_paused, not_celebrated, private, ..."
    )
    reason_label = serializers.CharField(source="label")


class UpcomingOccurrenceSerializer(serializers.Serializer):
    event_id = serializers.UUIDField()
    event_type = serializers.CharField()
    occurrence_date = serializers.DateField()
    milestone = serializers.IntegerField(
        source="years", allow_null=True, help_text="The years it counts, where the person lets them be said."
    )
    recipient = serializers.UUIDField(source="recipient_id")
    recipient_name = serializers.CharField(source="name")
    labels = serializers.ListField(child=serializers.CharField())
    language = serializers.CharField()
    send_at = serializers.DateTimeField(source="target_at", help_text="The recipient's send time, in UTC.")
    send_at_local = serializers.SerializerMethodField(help_text="The same instant in the recipient's zone.")
    timezone = serializers.CharField()
    placements = UpcomingPlacementSerializer(many=True)
    left_out = UpcomingLeftOutSerializer(many=True)

    def get_send_at_local(self, occurrence) -> str:
        return occurrence.target_local.isoformat()


class UpcomingPageSerializer(serializers.Serializer):
    until = serializers.DateTimeField(help_text="The end of the window read.")
    next_cursor = serializers.CharField(
        allow_null=True, help_text="Give as `cursor` for the next page; null: none."
    )
    results = UpcomingOccurrenceSerializer(source="occurrences", many=True)


class CalendarFeedSerializer(serializers.Serializer):
    url = serializers.CharField(help_text="The feed's URL, a credential: shown this once.")
