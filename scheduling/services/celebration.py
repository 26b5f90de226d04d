"""The company's visibility per event type (scheduling.celebration): an operator's choice, recorded."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from scheduling.celebration import DEFAULT_VISIBILITY, Visibility, celebration_narrowed
from scheduling.handlers import REGISTRY
from scheduling.models import CelebrationDefault

logger = logging.getLogger(__name__)


def celebration_default_set(*, event_type: str, visibility: str, by: str) -> CelebrationDefault:
    """Make `visibility` the type's default for everyone without a choice of their own.

    A narrower default (private or none) withdraws, in the same transaction, what it
    no longer allows and is not yet sent (scheduling.celebration.celebration_narrowed).
    """
    if event_type not in REGISTRY:
        raise ValidationError({"event_type": [f"{event_type!r} is not an event type."]})
    if visibility not in Visibility.values:
        raise ValidationError(
            {"visibility": [f"{visibility!r} is not one of {', '.join(Visibility.values)}."]}
        )
    if not by:
        raise ValueError("A company default must name who sets it.")
    with transaction.atomic():
        default, _created = CelebrationDefault.objects.select_for_update().update_or_create(
            event_type=event_type,
            defaults={"visibility": visibility, "updated_by": by, "updated_at": timezone.now()},
        )
        if visibility != DEFAULT_VISIBILITY:
            celebration_narrowed.send(sender=CelebrationDefault, user_id=None, event_types=[event_type])
    logger.info(
        "%s made %s the %s default",
        by,
        visibility,
        event_type,
        extra={"operator": by, "event_type": event_type},
    )
    return default
