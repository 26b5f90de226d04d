from typing import Any

from rest_framework import serializers

from config.fields import StrictBooleanField
from scheduling.models import EventTypePause

# Who paused or resumed, and when: an event type's pause and a recipient's (users.serializers) alike.
PAUSE_RECORD_HELP = {
    "paused_at": "When the latest pause began; null if never paused.",
    "paused_by": "Who made the latest pause (an operator's or API account's username).",
    "resumed_at": "When the latest pause ended; null while paused or if never paused.",
    "resumed_by": "Who ended the latest pause.",
}


class EventTypePauseSerializer(serializers.ModelSerializer):
    """Whether one event type's messages go out, for every recipient, and who paused or resumed them when."""

    paused = StrictBooleanField(
        help_text=(
            "true holds back this type's messages for every recipient from now on: an occurrence whose "
            'send time comes while paused is not sent but FAILED with the reason "event type paused", '
            "and the next one is scheduled. false resumes: each recipient's next occurrence whose send "
            "time has not passed is sent."
        ),
    )

    class Meta:
        model = EventTypePause
        fields = ["event_type", "paused", *PAUSE_RECORD_HELP]
        read_only_fields = ["event_type", *PAUSE_RECORD_HELP]
        extra_kwargs = {
            "event_type": {"help_text": "BIRTHDAY, or ANNIVERSARY (a wedding anniversary)."},
            **{name: {"help_text": text} for name, text in PAUSE_RECORD_HELP.items()},
        }

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["Expected a JSON object with `paused`."]})
        # A misspelt field would otherwise be dropped and the request "succeed" doing nothing.
        errors: dict[str, Any] = {field: ["Unknown field."] for field in sorted(set(data) - set(self.fields))}
        attrs = {}
        try:
            attrs = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            assert isinstance(exc.detail, dict)  # a serializer's errors are by field
            errors.update(exc.detail)
        if "paused" not in attrs and "paused" not in errors:
            # Even in a PATCH: it is the one thing a request here can change.
            errors["paused"] = ["This field is required."]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs
