"""The webhook body: the one place an event's message is rendered for sending."""

from __future__ import annotations

import uuid
from datetime import date, datetime

from scheduling.handlers import Recipient, get_handler


def webhook_payload(
    *,
    event_id: uuid.UUID,
    event_type: str,
    occurrence_date: date,
    target_utc: datetime,
    recipient: Recipient,
) -> dict:
    """The JSON body for one occurrence, with the message rendered from the recipient as they are now."""
    return {
        "message": get_handler(event_type).render_message(user=recipient),
        "event_id": str(event_id),
        "event_type": event_type,
        "user_id": str(recipient.id),
        "occurrence_date": occurrence_date.isoformat(),
        "target_timestamp_utc": target_utc.isoformat(),
    }
