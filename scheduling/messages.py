"""Message templates as text: what a valid one is, and the one place a message is rendered.

Pure functions, no database: the model's validation, the console's preview and
the scheduler's claim all call them. Templates use str.format's syntax, but only
plain named placeholders: no positional ({0}), attribute ({user.x}) or index
({a[0]}) fields, which would reach past the values a handler offers, and no
conversions or format specs ({age:d}, {first_name!r}), which depend on a value's
type the operator cannot see and could fail on some recipient at send time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from functools import lru_cache
from string import Formatter

from scheduling.handlers.base import EventHandler, Recipient

MESSAGE_TEMPLATE_MAX_LENGTH = 1000
# The values that count an occurrence's years (a birthday's age, an anniversary's years): a type
# offering one has milestones (scheduling.models.MessageTemplate.milestone), chosen by its value.
YEAR_PLACEHOLDERS = frozenset({"years", "age"})


def placeholder_list(names: Iterable[str]) -> str:
    """`{age}, {first_name}, {last_name}`: placeholders as an operator writes them, sorted."""
    return ", ".join("{" + name + "}" for name in sorted(names))


def template_errors(*, template: str, placeholders: frozenset[str]) -> list[str]:
    """Why `template` cannot be a message of a type offering `placeholders`; empty when it can.

    A template with no errors renders for every recipient: str.format then only
    looks up names the handler's message_values always returns.
    """
    if not template.strip():
        return ["The message is blank."]
    try:
        fields = [
            (name, conversion, spec)
            for _literal, name, spec, conversion in Formatter().parse(template)
            if name is not None
        ]
    except ValueError as exc:
        return [f"Unbalanced braces ({exc}): write {{{{ or }}}} for a literal brace."]
    allowed = placeholder_list(placeholders)
    errors = []
    for name, conversion, spec in fields:
        written = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        if not name.isidentifier():
            errors.append(f"{written} is not a placeholder: name one of {allowed}.")
        elif name not in placeholders:
            errors.append(f"Unknown placeholder {written}: use {allowed}.")
        elif conversion or spec:
            errors.append(f"{written}: conversions and formats are not allowed; write {{{name}}}.")
    # A placeholder written wrong twice is one mistake.
    return list(dict.fromkeys(errors))


@lru_cache(maxsize=1024)
def placeholders_used(template: str) -> frozenset[str]:
    """The placeholder names a valid template uses."""
    return frozenset(name for _literal, name, _spec, _conversion in Formatter().parse(template) if name)


def render_message(*, template: str, handler: EventHandler, user: Recipient, occurrence_date: date) -> str:
    """The message for one occurrence: `template` (valid for this handler) with the handler's values."""
    return template.format_map(handler.message_values(user=user, occurrence_date=occurrence_date))


def years_counted(values: dict[str, object]) -> int | None:
    """The years an occurrence counts, from its handler's message values; None for a type that counts none."""
    for name in sorted(YEAR_PLACEHOLDERS):
        if isinstance(years := values.get(name), int):
            return years
    return None
