"""An operator's resend: dead deliveries go back to the queue, same key, each to its destination.

Per destination: resending a DEAD delivery queues it again, and takes its
FAILED event back to PROCESSING (an event with other deliveries still running
stays PROCESSING). Per event: every DEAD delivery of a FAILED event is queued
again; the delivered ones are not sent twice. An event that failed before it
had any delivery (claimed too late) gets one per destination subscribed now.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import transaction
from django.utils import timezone

from delivery.actions.requeue import deliveries_requeue, event_payload, events_reopen
from delivery.destinations.audience import DestinationRouter
from delivery.destinations.services import destinations_for_queueing
from delivery.dispatch.claim import QueuedDeliveryRow, queued_delivery_defaults, queued_delivery_row
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationOptOut, Endpoint
from runtime.sql import insert_rows
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.exceptions import InvalidStateTransition
from scheduling.handlers import get_handler
from scheduling.models import Event, EventStatus
from scheduling.selectors import message_templates

logger = logging.getLogger(__name__)


def event_resend(*, event: Event, operator: str) -> Event:
    """Send a FAILED event's dead deliveries again, under the same idempotency key.

    Each is queued again with a fresh budget of attempts, to its destination's
    URL, with the message rendered from the recipient and the type's template
    as they are now, in the destination's format; never a second delivery to
    one destination.
    """
    with transaction.atomic():
        event = _event_locked(event=event)
        if event.status != EventStatus.FAILED:
            raise InvalidStateTransition(
                f"Only FAILED events can be resent; event {event.id} (version "
                f"{event.version}) is {event.status}."
            )
        dead = list(
            Delivery.objects.select_for_update(of=("self",))
            .select_related("destination")
            .filter(event_id=event.id, status=DeliveryStatus.DEAD)
        )
        has_deliveries = bool(dead) or Delivery.objects.filter(event_id=event.id).exists()
        if has_deliveries and not dead:
            raise InvalidStateTransition(
                f"Event {event.id} has no DEAD delivery; there is nothing to resend."
            )
        if not has_deliveries:
            # A FAILED event without deliveries (too late, paused): sent where the claim would send it now.
            destinations = DestinationRouter(destinations_for_queueing()).targets(
                event_type=event.event_type,
                labels=event.user.labels,
                opted_out=set(
                    DestinationOptOut.objects.filter(user_id=event.user_id).values_list(
                        "destination_id", flat=True
                    )
                ),
            )
            if not destinations:
                raise InvalidStateTransition(
                    f"No enabled destination subscribes to {event.event_type} events with this recipient in "
                    f"its audience; event {event.id} has nowhere to be sent."
                )
        _event_reopen(event=event)
        if has_deliveries:
            _deliveries_requeue(event=event, deliveries=dead)
        else:
            _deliveries_create(event=event, destinations=destinations)
    logger.info(
        "Operator %s resent event",
        operator,
        extra={"operator": operator, "event_id": str(event.id), "idempotency_key": event.idempotency_key},
    )
    return event


def delivery_resend(*, delivery: Delivery, operator: str) -> Delivery:
    """Resend one DEAD delivery (one destination's); its FAILED event is PROCESSING again until it ends."""
    if delivery.digest_id is not None:
        return _digest_resend(delivery=delivery, operator=operator)
    with transaction.atomic():
        assert delivery.event is not None  # delivery_event_or_digest
        event = _event_locked(event=delivery.event)
        current = _dead_delivery_locked(delivery=delivery, related=("destination",))
        if event.status == EventStatus.FAILED:
            _event_reopen(event=event)
        _deliveries_requeue(event=event, deliveries=[current])
    return _resent(delivery=current, operator=operator, message="Operator %s resent delivery")


def _digest_resend(*, delivery: Delivery, operator: str) -> Delivery:
    """Resend a DEAD digest: the same lines under the same key, in the destination's kind as it is now."""
    with transaction.atomic():
        current = _dead_delivery_locked(delivery=delivery, related=("destination", "digest"))
        deliveries_requeue(
            source=DeliveryStatus.DEAD,
            deliveries=[current],
            events={},
            templates=message_templates(),
            now=timezone.now(),
        )
        notify(WORKER_CHANNEL)
    return _resent(delivery=current, operator=operator, message="Operator %s resent a digest")


def _dead_delivery_locked(*, delivery: Delivery, related: tuple[str, ...]) -> Delivery:
    """The delivery as it is now, locked, with `related` loaded; refused unless it is DEAD."""
    current = Delivery.objects.select_for_update(of=("self",)).select_related(*related).get(pk=delivery.pk)
    if current.status != DeliveryStatus.DEAD:
        raise InvalidStateTransition(
            f"Only DEAD deliveries can be resent; delivery {current.id} is {current.status}."
        )
    return current


def _resent(*, delivery: Delivery, operator: str, message: str) -> Delivery:
    """Log the operator's resend (`message` names them with %s) and return the delivery as it is now."""
    logger.info(
        message,
        operator,
        extra={
            "operator": operator,
            "delivery_id": str(delivery.id),
            "idempotency_key": delivery.idempotency_key,
        },
    )
    delivery.refresh_from_db()
    return delivery


def _event_locked(*, event: Event) -> Event:
    """The event as it is now, locked, with its recipient; refused if there is nothing to resend."""
    current = Event.objects.select_for_update().select_related("user").filter(pk=event.pk).first()
    if current is None:
        # Deleted since the operator saw it: old history pruned
        # (delivery.dispatch.retention), or the recipient deleted.
        raise InvalidStateTransition(f"Event {event.id} no longer exists; there is nothing to resend.")
    handler = get_handler(current.event_type)
    if not type(current.user).objects.filter(handler.applies_to, pk=current.user_id).exists():
        # The recipient no longer has this kind of event (their anniversary
        # date was cleared): there is nothing to celebrate, and the message
        # could not be rendered.
        raise InvalidStateTransition(
            f"Event {current.id} is a {current.get_event_type_display().lower()} the recipient no longer "
            "has (its date was removed); there is nothing to resend."
        )
    return current


def _event_reopen(*, event: Event) -> None:
    events_reopen(events=[event])


def _deliveries_create(*, event: Event, destinations: Sequence[Destination]) -> None:
    templates = message_templates()
    insert_rows(
        Delivery,
        QueuedDeliveryRow._fields,
        [
            queued_delivery_row(
                event_id=event.id,
                destination=destination,
                idempotency_key=event.idempotency_key,
                payload=event_payload(event=event, templates=templates, destination=destination),
            )
            for destination in destinations
        ],
        same_for_all=queued_delivery_defaults(now=timezone.now()),
    )
    notify(WORKER_CHANNEL)


def _deliveries_requeue(*, event: Event, deliveries: list[Delivery]) -> None:
    """Queue the DEAD `deliveries` again: to their destination's URL and format as they are now."""
    gone = [
        d
        for d in deliveries
        if d.destination is None and not Endpoint.objects.filter(key=d.endpoint_key).exists()
    ]
    if gone:
        # Its destination was deleted, and with it the only copy of the URL it went to.
        raise InvalidStateTransition(
            f"Delivery {gone[0].id}'s destination was deleted: there is no receiver to send it to."
        )
    moved = deliveries_requeue(
        source=DeliveryStatus.DEAD,
        deliveries=deliveries,
        events={event.id: event},
        templates=message_templates(),
        now=timezone.now(),
    )
    if len(moved) != len(deliveries):
        lost = next(d for d in deliveries if d.id not in set(moved))
        raise InvalidStateTransition(
            f"Delivery {lost.id} is {lost.status}; only a DEAD delivery can be resent."
        )
    notify(WORKER_CHANNEL)
