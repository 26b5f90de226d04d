"""Erasing a recipient's deliveries: the rendered bodies and the receiver's answers go; the bare attempts stay.

Called inside the recipient's erase (users.services.user_erase, through the
users.signals.recipient_erasing receiver), before and after it locks their
events: a delivery's row is locked before its event's, in the order a worker
recording an outcome takes them. A delivery carries the rendered message (the
recipient's name and id) and the last error; an attempt, the receiver's answer
(response_excerpt, which may echo the body) and its error text. The deliveries
and their admin log go. Each attempt stays, stripped of both texts and of its
delivery, as what it says about the receiver and the fleet without naming
anyone: when, how long, which outcome, which status code, which worker. The
web's /metrics and the console's dashboard count attempts from these rows, and
the history prune deletes them after HISTORY_RETENTION (delivery.dispatch.retention).

A delivery being sent (SENDING, under a worker's lease) is cancelled: its row
is locked first, so a worker recording an outcome at that moment finishes
before, and one recording later finds no row under its lease and writes
nothing (delivery.worker.record: a lease lost). The request itself may
already be on its way to the receiver, under its idempotency key.

What it returns tells the erase which of the recipient's occurrences may
have reached a receiver: those are remembered as handled, so the same person
created again the same day is not greeted twice
(scheduling.services.deleted_recipients). A delivery counts once a request
for it was started (its attempts count from the claim, before the request)
or it was delivered; one the erase cancelled while it waited (a paused or
failing destination, a queue behind) reached no one.
"""

from __future__ import annotations

import uuid

from delivery.dispatch.digests import digests_erase
from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus
from delivery.states.successes import successes_log
from scheduling.admin_log import admin_log_forget


def deliveries_erase(*, user_id: uuid.UUID) -> set[uuid.UUID]:
    """Delete the deliveries of the recipient's events and strip their attempts.

    Returns the ids of the events one of whose deliveries may have reached a receiver. The
    digests naming them lose their line and are rendered again (digests_erase).
    """
    digests_erase(user_id=user_id)
    locked = list(
        Delivery.objects.select_for_update(of=("self",))
        .filter(event__user_id=user_id)
        .order_by("id")
        .values_list("id", "event_id", "attempts", "status")
    )
    if not locked:
        return set()
    delivery_ids = [delivery_id for delivery_id, _, _, _ in locked]
    reached = {
        event_id
        for _, event_id, attempts, status in locked
        if attempts > 0 or status in (DeliveryStatus.SENDING, DeliveryStatus.DELIVERED)
    }
    # A success recorded on its delivery becomes a row first: it is kept, stripped, as every attempt is.
    successes_log(delivery_ids=delivery_ids)
    DeliveryAttempt.objects.filter(delivery_id__in=delivery_ids).update(
        delivery=None, error="", response_excerpt=""
    )
    admin_log_forget(model=Delivery, object_ids=delivery_ids)
    Delivery.objects.filter(id__in=delivery_ids).delete()
    return reached
