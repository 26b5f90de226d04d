"""Writes to message templates: an operator's change, and one row per registered event type."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import DEFAULT_DB_ALIAS, models

from runtime.sql import column_field
from scheduling.handlers import REGISTRY
from scheduling.models import MessageTemplate

logger = logging.getLogger(__name__)


def message_template_save(*, template: MessageTemplate, operator: str) -> MessageTemplate:
    """Store an operator's text for an event type (ValidationError if it is not valid).

    Events claimed from now on are rendered with it; deliveries already queued
    keep the message they were queued with.
    """
    template.updated_by = operator
    template.full_clean()
    template.save()
    logger.info(
        "Operator %s changed the %s message",
        operator,
        template.event_type,
        extra={
            "operator": operator,
            "event_type": template.event_type,
            "language": template.language,
            "milestone": template.milestone,
        },
    )
    return template


def message_template_delete(*, template: MessageTemplate, operator: str) -> None:
    """Delete a language's or a milestone's text; its recipients get the text it stood in front of.

    A type's default row is not deleted (ValidationError): the next migrate would bring it
    back with the handler's default; an operator restores that by saving its text instead.
    """
    if template.is_default:
        raise ValidationError(
            "The default text of an event type cannot be deleted; save the default text instead."
        )
    template.delete()
    logger.info(
        "Operator %s deleted the %s message for %s",
        operator,
        template.event_type,
        template.language or "every language",
        extra={
            "operator": operator,
            "event_type": template.event_type,
            "language": template.language,
            "milestone": template.milestone,
        },
    )


def message_templates_create_missing(
    *, model: type[models.Model] = MessageTemplate, using: str = DEFAULT_DB_ALIAS
) -> None:
    """Give every registered event type without a row one holding its handler's default.

    Run after every migrate (scheduling.signals), from the live registry rather
    than a data migration, which would be frozen at the types of its day: a new
    event type is listed in the console, with its default, by its first migrate.
    The rows an operator changed stay as they are. `model` is the migration
    state's, as post_migrate hands it over: a type registered in code whose
    migration (the one allowing it in the table's CHECK) is not applied yet
    gets its row from the migrate that applies it.
    """
    migrated = {value for value, _label in column_field(model, "event_type").field.choices or ()}
    model._default_manager.using(using).bulk_create(
        [
            model(event_type=event_type, body=handler.message_template)
            for event_type, handler in REGISTRY.items()
            if event_type in migrated
        ],
        ignore_conflicts=True,
    )
