"""Recipients' labels, as destinations' audiences name them: what a label is.

A recipient carries a few labels (users.User.labels) and a destination greets
the recipients holding some of them (delivery.destinations.audience); both hold them to the
rule here, beneath both apps, so that an audience can only name a label a
recipient can hold.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db.models import CharField, F, Func, IntegerField, Q, Value
from django.db.models.lookups import Exact, Regex

# A recipient's labels: a few words a destination's audience names (delivery.destinations.audience).
# Lowercase letters, digits and . _ -, optionally one "key:value" (team:platform,
# office:berlin, remote): what a person types in a CSV cell or a chat channel's
# settings, with nothing that needs quoting in a URL's ?label= or a CSV cell.
# Taken in any case and stored in lowercase, so Team:Platform and team:platform are
# one label an audience cannot miss by a capital.
LABEL_MAX_LENGTH = 50
LABELS_MAX_COUNT = 20
LABEL_PATTERN = r"^[a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?$"
_LABEL = re.compile(LABEL_PATTERN)
# Every label of an array by LABEL_PATTERN, as PostgreSQL checks the array joined by spaces:
# "" (none) or labels separated by one space. (A label holding a space would read as two
# here: labels_by_rule also counts the pieces.)
LABELS_JOINED_PATTERN = (
    r"^([a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?( [a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?)*)?$"
)


# Between the labels of one line of text (the console's box, an import's cell): a comma or a
# semicolon, never a space, so that "team platform" is refused as one label holding a space
# (as the API refuses ["team platform"]) rather than read as two labels that change who is greeted.
LABELS_TEXT_SEPARATORS = ",;"
_TEXT_SEPARATOR = re.compile(f"[{LABELS_TEXT_SEPARATORS}]")


def labels_from_text(text: str | None) -> list[str]:
    """The labels typed on one line ("team:platform, remote" or "team:platform;remote"), to check by
    clean_labels: split at commas and semicolons only, each trimmed, empty pieces dropped."""
    return [piece.strip() for piece in _TEXT_SEPARATOR.split(text or "") if piece.strip()]


def clean_labels(value: object) -> list[str]:
    """A recipient's labels, trimmed, lowercased, without repeats and sorted; None or [] for none.

    At most LABELS_MAX_COUNT, each by LABEL_PATTERN and at most LABEL_MAX_LENGTH characters:
    a few words to choose audiences by, not a place to store data about the person.
    """
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(label, str) for label in value):
        raise ValidationError('Labels must be a list of strings, such as ["team:platform", "office:berlin"].')
    labels = sorted({label.strip().lower() for label in value})
    errors = []
    for label in labels:
        if len(label) > LABEL_MAX_LENGTH:
            errors.append(f"Label {label!r} is longer than {LABEL_MAX_LENGTH} characters.")
        elif any(character.isspace() for character in label):
            errors.append(
                f"Label {label!r} holds a space: separate labels with commas (team, platform), or join "
                "the words with - (team-platform)."
            )
        elif not _LABEL.fullmatch(label):
            errors.append(
                f"Label {label!r} is not a label: lowercase letters, digits and . _ -, optionally "
                "one key:value, such as team:platform or remote."
            )
    if len(labels) > LABELS_MAX_COUNT:
        errors.append(f"At most {LABELS_MAX_COUNT} labels (got {len(labels)}).")
    if errors:
        raise ValidationError(errors)
    return labels


def labels_by_rule(field: str) -> Q:
    """A CHECK constraint's condition: every label of the array column `field` is by LABEL_PATTERN.

    The database holds the rule for every path that writes (an audience is matched label by
    label, case and all: a label written around the services in capitals would match nobody).
    The array joined by spaces matches the pattern, and splits back into as many pieces as
    it has labels (so no label holds a space, nor is empty).
    """
    joined = Func(F(field), Value(" "), function="array_to_string", output_field=CharField())
    pieces = Func(
        Func(joined, Value(" "), function="string_to_array"),
        function="cardinality",
        output_field=IntegerField(),
    )
    count = Func(F(field), function="cardinality", output_field=IntegerField())
    return Q(Regex(joined, LABELS_JOINED_PATTERN)) & Q(Exact(count, pieces))
