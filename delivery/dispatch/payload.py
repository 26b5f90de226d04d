"""The webhook body: what is sent for an event, its message rendered by scheduling.messages."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from delivery.models import Destination, DestinationFormat
from scheduling.handlers import REGISTRY, Recipient
from scheduling.messages import template_errors
from scheduling.selectors import MessageTemplates, Occasion, message_choice, subject_for
from users.models import User

logger = logging.getLogger(__name__)


class Occurrence(Occasion, Protocol):
    """An occurrence as its message names it: an Event, or the scheduler claim's row of one."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def target_timestamp_utc(self) -> datetime: ...


def webhook_payload(
    *,
    occurrence: Occurrence,
    recipient: Recipient,
    templates: MessageTemplates,
    language: str = "",
    override: str | None = None,
) -> dict[str, Any]:
    """The JSON body for one occurrence, with the message rendered from the recipient as they are now.

    `templates` are the ones in force (scheduling.selectors.message_templates,
    read once per batch by the caller): the text is the one for the recipient's
    `language` and the occurrence's years, unless a destination's `override`
    (message_overrides) replaces it.
    """
    message = message_choice(
        templates=templates, occasion=occurrence, user=recipient, language=language, override=override
    ).text
    return {
        "message": message,
        "event_id": str(occurrence.id),
        "event_type": occurrence.event_type,
        "user_id": str(recipient.id),
        "occurrence_date": occurrence.occurrence_date.isoformat(),
        "target_timestamp_utc": occurrence.target_timestamp_utc.isoformat(),
    }


def email_payload(
    payload: dict[str, Any],
    *,
    occurrence: Occurrence,
    recipient: Recipient,
    templates: MessageTemplates,
    language: str = "",
    address: str = "",
) -> dict[str, Any]:
    """`payload` with what an email (kinds.email) needs besides: its subject, rendered from the templates in the
    recipient's language (scheduling.selectors.subject_for), and the address it goes to ("": the destination's
    fixed addresses)."""
    subject = subject_for(
        templates=templates,
        event_type=occurrence.event_type,
        user=recipient,
        occurrence_date=occurrence.occurrence_date,
        language=language,
    )
    return {**payload, "subject": subject, "email": address}


def destination_payload(
    *,
    destination: Destination | None,
    occurrence: Occurrence,
    recipient: User,
    templates: MessageTemplates,
    override: str | None = None,
) -> dict[str, Any]:
    """The payload of one delivery as `destination`'s kind takes it, rendered for the recipient as they are now:
    webhook_payload in their language, and for an email destination email_payload's additions (a personal one's
    to their address, unless marked undeliverable). For the paths that render one delivery again (a resend, a
    requeue, an edit of the recipient): the claim does the same itself, for a batch."""
    language = recipient.language
    payload = webhook_payload(
        occurrence=occurrence, recipient=recipient, templates=templates, language=language, override=override
    )
    if destination is None or destination.format != DestinationFormat.EMAIL:
        return payload
    personal_address = recipient.email if recipient.email_undeliverable_at is None else ""
    return email_payload(
        payload,
        occurrence=occurrence,
        recipient=recipient,
        templates=templates,
        language=language,
        address=personal_address if destination.personal else "",
    )


def message_overrides(*, destinations: Iterable[Destination]) -> dict[tuple[int, str], str]:
    """Each destination's own text per event type, by (destination id, type): the valid ones.

    Checked once per batch rather than per message: a stored text that no longer fits
    its type (a later release dropped a placeholder, a write went around the service)
    is left out, with an error logged, and its messages get the templates' text.
    """
    overrides = {}
    for destination in destinations:
        for event_type, body in (destination.message_overrides or {}).items():
            handler = REGISTRY.get(event_type)
            errors = (
                template_errors(template=body, placeholders=handler.placeholders)
                if handler and isinstance(body, str)
                else ["not an event type's text"]
            )
            if errors:
                logger.error(
                    "A destination's own message is not valid; sending the templates' text",
                    extra={"destination": destination.name, "event_type": event_type, "errors": errors},
                )
                continue
            overrides[(destination.pk, event_type)] = body
    return overrides
