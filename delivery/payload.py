"""The webhook body: what is sent for an event, its message rendered by scheduling.messages."""

from __future__ import annotations

import uuid
from datetime import date, datetime

from scheduling.handlers import Recipient, get_handler
from scheduling.messages import render_message


def webhook_payload(
    *,
    event_id: uuid.UUID,
    event_type: str,
    occurrence_date: date,
    target_utc: datetime,
    recipient: Recipient,
    template: str,
) -> dict:
    """The JSON body for one occurrence, with the message rendered from the recipient as they are now.

    `template` is the type's current one (scheduling.selectors.message_templates,
    read once per batch by the caller).
    """
    return {
        "message": render_message(
            template=template,
            handler=get_handler(event_type),
            user=recipient,
            occurrence_date=occurrence_date,
        ),
        "event_id": str(event_id),
        "event_type": event_type,
        "user_id": str(recipient.id),
        "occurrence_date": occurrence_date.isoformat(),
        "target_timestamp_utc": target_utc.isoformat(),
    }
