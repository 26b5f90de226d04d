"""Serializer fields every API resource shares: JSON values taken as they are, never coerced."""

from django.core.validators import RegexValidator
from rest_framework import serializers

# Holds a character that is not white space: what a text that may not be blank must have, since the
# serializer trims it first (Python's white space, which \s matches, and str.strip removes).
NOT_BLANK = RegexValidator(r"\S")


class StrictBooleanField(serializers.BooleanField):
    """A JSON true or false, refusing the strings and numbers DRF's BooleanField would take ("yes", 1)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictCharField(serializers.CharField):
    """Text as given: a number or a boolean is refused rather than turned into text.

    One that may not be blank and is trimmed says so in the OpenAPI document (a pattern of a
    non-space character), unless it has a pattern of its own: "\x1c" is not a valid name, and a
    client reading the document must be able to know it.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.allow_blank and self.trim_whitespace:
            if not any(isinstance(validator, RegexValidator) for validator in self.validators):
                self.validators.append(NOT_BLANK)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
