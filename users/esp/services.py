"""What an ESP's tracking event means for a recipient's address."""

import logging
from datetime import datetime
from email.utils import parseaddr

from anymail.signals import AnymailTrackingEvent, EventType
from django.core.exceptions import ValidationError

from users.models import User
from users.services import recipient_email_undeliverable_mark
from users.validators import clean_email

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
        return esp_event.get("bounce", {}).get("bounceType") == "Permanent"
    if esp_name == "Postmark":
        # anymail maps SoftBounce to bounced too.
        return esp_event.get("Type") == "HardBounce"
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


def esp_tracking_event_record(*, esp_name: str, event: AnymailTrackingEvent, now: datetime | None = None) -> int:
    """Mark the address of a hard bounce or a complaint undeliverable for each person who has it now.

    Found by the address as users.validators.clean_email stores it; an address no one has
    (any more) is ignored, and a person whose address changed since keeps the new one
    unmarked (recipient_email_undeliverable_mark checks it in its own update). Returns how
    many people were marked.
    """
    reason = esp_event_reason(esp_name=esp_name, event=event)
    if reason is None:
        return 0
    try:
        address = clean_email(parseaddr(event.recipient or "")[1])
    except ValidationError:
        address = ""
    if not address:
        logger.warning("ESP event without a usable recipient", extra={"esp": esp_name, "event_id": event.event_id})
        return 0
    marked = 0
    for user_id in User.objects.filter(email=address).values_list("id", flat=True):
        if recipient_email_undeliverable_mark(user_id=user_id, email=address, reason=reason, now=now):
            marked += 1
            logger.info(
                "Marked a recipient's email undeliverable",
                extra={"user_id": str(user_id), "esp": esp_name, "event_id": event.event_id},
            )
    return marked
