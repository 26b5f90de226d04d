"""An operator's resend: a FAILED event's one delivery goes back to the queue, same key."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.models import Delivery, DeliveryStatus
from delivery.payload import webhook_payload
from delivery.services.enqueue import QueuedDeliveryRow, queued_delivery_defaults, queued_delivery_row
from delivery.services.transitions import Rows, deliveries_transition
from runtime.sql import insert_rows
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.exceptions import InvalidStateTransition
from scheduling.handlers import get_handler
from scheduling.models import Event, EventStatus
from scheduling.selectors import message_templates
from scheduling.services.transitions import Actor, events_transition

logger = logging.getLogger(__name__)


def event_resend(*, event: Event, operator: str) -> Event:
    """Send a FAILED event again, under the same idempotency key.

    Its one delivery is queued again (or created, if the event failed before it
    had one) with a fresh budget of attempts, to today's receiver, with the
    message rendered from the recipient and the type's template as they are
    now; never a second delivery.
    """
    with transaction.atomic():
        current = Event.objects.select_for_update().select_related("user").filter(pk=event.pk).first()
        if current is None:
            # Deleted since the operator saw it: old history pruned
            # (delivery.services.retention), or the recipient deleted.
            raise InvalidStateTransition(f"Event {event.id} no longer exists; there is nothing to resend.")
        event = current
        if event.status != EventStatus.FAILED:
            raise InvalidStateTransition(
                f"Only FAILED events can be resent; event {event.id} (version "
                f"{event.version}) is {event.status}."
            )
        handler = get_handler(event.event_type)
        if not type(event.user).objects.filter(handler.applies_to, pk=event.user_id).exists():
            # The recipient no longer has this kind of event (their anniversary
            # date was cleared): there is nothing to celebrate, and the message
            # could not be rendered.
            raise InvalidStateTransition(
                f"Event {event.id} is a {event.get_event_type_display().lower()} the recipient no longer "
                "has (its date was removed); there is nothing to resend."
            )
        events_transition(
            events=[event],
            source=EventStatus.FAILED,
            target=EventStatus.PROCESSING,
            actor=Actor.OPERATOR,
            changes={"failure_reason": ""},
        )
        _delivery_requeue(event=event)
    logger.info(
        "Operator %s resent event",
        operator,
        extra={"operator": operator, "event_id": str(event.id), "idempotency_key": event.idempotency_key},
    )
    return event


def delivery_resend(*, delivery: Delivery, operator: str) -> Delivery:
    """Resend a DEAD delivery: its FAILED event goes back to the queue."""
    if delivery.status != DeliveryStatus.DEAD:
        raise InvalidStateTransition(
            f"Only DEAD deliveries can be resent; delivery {delivery.id} is {delivery.status}."
        )
    event_resend(event=delivery.event, operator=operator)
    delivery.refresh_from_db()
    return delivery


def _delivery_requeue(*, event: Event) -> None:
    now = timezone.now()
    payload = webhook_payload(
        event_id=event.id,
        event_type=event.event_type,
        occurrence_date=event.occurrence_date,
        target_utc=event.target_timestamp_utc,
        recipient=event.user,
        template=message_templates()[event.event_type],
    )
    delivery = Delivery.objects.select_for_update().filter(event_id=event.id).first()
    if delivery is None:
        insert_rows(
            Delivery,
            QueuedDeliveryRow._fields,
            [queued_delivery_row(event_id=event.id, idempotency_key=event.idempotency_key, payload=payload)],
            same_for_all=queued_delivery_defaults(now=now),
        )
    else:
        moved = deliveries_transition(
            source=DeliveryStatus.DEAD,
            target=DeliveryStatus.QUEUED,
            select=Rows(ids=[delivery.id], attempts=[delivery.attempts]),
            now=now,
            # Today's receiver; the old error stays in the attempt log; attempt
            # numbers keep counting, with a fresh budget on top.
            changes={
                "payload": payload,
                "endpoint_url": settings.WEBHOOK_URL,
                "last_error": "",
                "next_attempt_at": now,
                "requeued_at": now,
                "max_attempts": delivery.attempts + settings.DELIVERY_MAX_ATTEMPTS,
            },
        )
        if not moved:
            raise InvalidStateTransition(
                f"Delivery {delivery.id} is {delivery.status}; only a DEAD delivery can be resent."
            )
    notify(WORKER_CHANNEL)
