"""The destinations API's shapes. Validation of the values is the service's (delivery.services.destinations)."""

from __future__ import annotations

from datetime import timedelta

from rest_framework import serializers

from delivery.models import Destination, DestinationFormat, DestinationSecret, EndpointState
from scheduling.event_types import EventType


class SecondsField(serializers.FloatField):
    """A duration as a number of seconds, as WEBHOOK_TIMEOUT is written."""

    # The bounds a timedelta can hold comfortably; the service then holds it to WEBHOOK_TIMEOUT.
    LONGEST = 86400.0

    def to_internal_value(self, data):
        seconds = super().to_internal_value(data)
        if not 0 <= seconds <= self.LONGEST:
            raise serializers.ValidationError(f"A number of seconds from 0 to {self.LONGEST:g}.")
        return timedelta(seconds=seconds)

    def to_representation(self, value: timedelta):
        return value.total_seconds()


class DestinationSecretSerializer(serializers.ModelSerializer):
    class Meta:
        model = DestinationSecret
        fields = ["hint", "created_at", "expires_at"]
        extra_kwargs = {
            "hint": {"help_text": "The prefix and the first characters: enough to tell secrets apart, never to sign."},
            "expires_at": {"help_text": "Null: in force. Else it signs beside the newer one until then (rotation)."},
        }


class DestinationSerializer(serializers.ModelSerializer):
    """A receiver of greetings. Its signing secrets appear as hints only; the secret itself is in the
    answer to the create and rotate-secret requests, once."""

    event_types = serializers.ListField(
        child=serializers.ChoiceField(choices=EventType.choices), required=False, allow_empty=True,
        help_text="The event types it receives; empty (the default): every type, including types added later.",
    )
    format = serializers.ChoiceField(
        choices=DestinationFormat.choices, required=False,
        help_text="standard: the JSON body with Standard Webhooks signatures; slack, discord, teams: the body "
        "their incoming webhooks accept (signed too).",
    )
    timeout = SecondsField(
        required=False, allow_null=True,
        help_text="Seconds to wait for its answer; null: WEBHOOK_TIMEOUT, which it may not exceed.",
    )
    secret = serializers.CharField(
        write_only=True, required=False, allow_blank=True, trim_whitespace=True,
        help_text="On create only: a signing secret to use (whsec_ + base64 of 24 to 64 bytes); left out, the "
        "server makes one. Either way it is in this answer only.",
    )
    secrets = DestinationSecretSerializer(many=True, read_only=True, help_text="Its signing secrets, as hints.")
    paused = serializers.SerializerMethodField(help_text="Whether an operator paused it (its endpoint's pause).")
    endpoint_state = serializers.SerializerMethodField(help_text="Its URL's health: HEALTHY, FAILING or PAUSED.")

    class Meta:
        model = Destination
        fields = [
            "id", "name", "url", "event_types", "format", "enabled", "max_rate", "max_in_flight", "timeout",
            "secret", "secrets", "paused", "endpoint_state", "created_by", "updated_by", "created_at", "updated_at",
            "version",
        ]
        read_only_fields = ["created_by", "updated_by", "created_at", "updated_at", "version"]
        extra_kwargs = {
            "name": {"help_text": "Unique; how operators and failure reasons name it."},
            "url": {"help_text": "Where its deliveries are POSTed (http or https). A new URL takes its unsent "
                    "deliveries with it."},
            "enabled": {"help_text": "Disabled: occurrences claimed meanwhile get no delivery for it."},
            "max_rate": {"help_text": "Most requests per second from all workers; null: WEBHOOK_MAX_RATE."},
            "max_in_flight": {"help_text": "Most requests open at once from all workers; null: WEBHOOK_MAX_IN_FLIGHT."},
            "version": {"help_text": "Bumped by every change of its settings or secrets; the ETag."},
        }
        # The service validates and reports each field; the model's unique validators would only read twice.
        validators = []

    def get_fields(self):
        fields = super().get_fields()
        for name in ("name", "url"):
            fields[name].validators = [v for v in fields[name].validators if not hasattr(v, "queryset")]
        return fields

    def get_paused(self, destination: Destination) -> bool:
        return self.get_endpoint_state(destination) == EndpointState.PAUSED

    def get_endpoint_state(self, destination: Destination) -> str:
        endpoints = self.context.get("endpoints")
        endpoint = endpoints.get(destination.url) if endpoints is not None else None
        return endpoint.state if endpoint is not None else EndpointState.HEALTHY

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object with the destination's fields."]})
        writable = {name for name, field in self.fields.items() if not field.read_only}
        errors = {field: ["Unknown field."] for field in sorted(set(data) - writable)}
        if self.instance is not None and "secret" in data:
            errors["secret"] = ["A secret is changed with POST .../rotate-secret/."]
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors.update({field: _messages(detail) for field, detail in exc.detail.items()})
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def _messages(detail) -> list:
    """A field's errors as a list of messages: a list's are by item ({"0": [...]}), said as "Item 1: ..."."""
    if isinstance(detail, dict):
        return [f"Item {int(index) + 1}: {message}" for index, messages in detail.items() for message in messages]
    return detail


class NewSecretSerializer(serializers.Serializer):
    """The answer to a rotation: the new secret, this once, and what now signs."""

    secret = serializers.CharField(help_text="The new signing secret. Shown now and never again.")
    secrets = DestinationSecretSerializer(many=True, help_text="Every secret now signing, as hints.")


class RotateSecretSerializer(serializers.Serializer):
    secret = serializers.CharField(
        required=False, allow_blank=True,
        help_text="A signing secret to use (whsec_ + base64 of 24 to 64 bytes); left out, the server makes one.",
    )

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object."]})
        unknown = {field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))}
        if unknown:
            raise serializers.ValidationError(unknown)
        return super().to_internal_value(data)
