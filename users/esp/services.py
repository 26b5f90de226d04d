"""What an ESP's tracking event means for a recipient's address."""

import logging
from datetime import datetime
from email.utils import parseaddr

from anymail.signals import AnymailTrackingEvent, EventType

from users.services import recipient_email_undeliverable_mark

logger = logging.getLogger(__name__)

# The longest part of an ESP's diagnostic kept in the reason: enough for an SMTP reply.
DETAIL_MAX = 300


def _permanent_bounce(*, esp_name: str, event: AnymailTrackingEvent) -> bool:
    """Whether a `bounced` event is a hard bounce: the address will never take mail.

    anymail's `bounced` also holds bounces that are not the address's fault for good, told
    apart only in each ESP's own fields; an ESP not named here marks nothing.
    """
    esp_event = event.esp_event if isinstance(event.esp_event, dict) else {}
    if esp_name == "Amazon SES":
        # "Transient" (mailbox full, message too large) and "Undetermined" are not for good.
        return bool(esp_event.get("bounce", {}).get("bounceType") == "Permanent")
    if esp_name == "Postmark":
        # anymail maps SoftBounce to bounced too.
        return bool(esp_event.get("Type") == "HardBounce")
    if esp_name == "SendGrid":
        # type "blocked" is SendGrid's own IP or content being refused, not the address.
        return esp_event.get("event") == "bounce" and esp_event.get("type", "bounce") == "bounce"
    if esp_name == "Mailgun":
        # anymail maps a temporary failure to deferred: a bounced one is permanent.
        return True
    return False


def esp_event_reason(*, esp_name: str, event: AnymailTrackingEvent) -> str | None:
    """Why the event's address is undeliverable (for the recipient's page), or None: it changes nothing.

    A hard bounce or a complaint; a soft bounce, a deferral, a delivery or an open, None.
    """
    detail = " ".join(str(event.mta_response or event.description or "").split())[:DETAIL_MAX]
    if event.event_type == EventType.COMPLAINED:
        kind = f"{esp_name} reported a complaint (marked as spam)"
    elif event.event_type == EventType.BOUNCED and _permanent_bounce(esp_name=esp_name, event=event):
        kind = f"{esp_name} reported a hard bounce"
    else:
        return None
    return f"{kind}: {detail}" if detail else kind


def esp_tracking_event_record(
    *, esp_name: str, event: AnymailTrackingEvent, now: datetime | None = None
) -> int:
    """Mark the address of a hard bounce or a complaint undeliverable for each person who has it now.

    Found by the address as users.validators.clean_email stores it (in any case); an address no
    one has (any more) is ignored, and a person whose address changed since keeps the new one
    unmarked (recipient_email_undeliverable_mark matches the current address in its own update).
    Returns how many people were marked.
    """
    reason = esp_event_reason(esp_name=esp_name, event=event)
    if reason is None:
        return 0
    # An ESP may report the address with a display name ("Ada <ada@example.com>").
    address = parseaddr(event.recipient or "")[1]
    marked: int = recipient_email_undeliverable_mark(email=address, reason=reason, now=now)
    logger.info(
        "ESP reported an address undeliverable",
        extra={"esp": esp_name, "event_id": event.event_id, "event": event.event_type, "recipients": marked},
    )
    return marked
