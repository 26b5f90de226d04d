"""Serializer fields every API resource shares: JSON values taken as they are, never coerced."""

from rest_framework import serializers


class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false, refusing the strings and numbers DRF's BooleanField would take ("yes", 1)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictCharField(serializers.CharField):
    """Text as given: a number or a boolean is refused rather than turned into text."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
