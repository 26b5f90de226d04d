"""Queuing ended deliveries again, as an operator asks: a resend (delivery.actions.resend) or a recovery
(delivery.actions.recovery). One way for both, so the two never send different things.

Each delivery goes back to the queue under its own idempotency key, due now,
with a fresh budget of attempts on top of those spent (attempt numbers keep
counting; the old outcome stays in the attempt log), to its destination's URL
as it is now, with the message rendered from the recipient and the type's
template as they are now, in the destination's format as it is now. Its event
is PROCESSING again until its last delivery ends (delivery.states.conclude).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings

from delivery.destinations.mentions import (
    MentionsByFormat,
    digest_mentions,
    mention_for,
    recipients_mentions,
)
from delivery.dispatch.payload import destination_payload, message_overrides
from delivery.models import Delivery, DeliveryStatus, Destination
from delivery.rules.digest_calendar import digest_body
from delivery.states.successes import successes_log
from delivery.states.transitions import Rows, deliveries_transition
from kinds import STANDARD, kind_for
from scheduling.models import Event, EventStatus
from scheduling.selectors import MessageTemplates
from scheduling.services.transitions import Actor, events_transition


def event_payload(
    *, event: Event, templates: MessageTemplates, destination: Destination | None = None
) -> dict[str, Any]:
    """The standard body of `event` (its `user` loaded) rendered now, with `templates` (message_templates()),
    in the recipient's language, or in `destination`'s own text for the type if it has one."""
    override = (
        message_overrides(destinations=[destination]).get((destination.pk, event.event_type))
        if destination
        else None
    )
    return destination_payload(
        destination=destination,
        occurrence=event,
        recipient=event.user,
        templates=templates,
        override=override,
    )


def deliveries_requeue(
    *,
    source: str,
    deliveries: Sequence[Delivery],
    events: Mapping[uuid.UUID, Event],
    templates: MessageTemplates,
    now: datetime,
) -> list[uuid.UUID]:
    """Queue `deliveries` (each in `source`, its destination loaded) again in one UPDATE; return the ids moved.

    `events` holds each one's event with its recipient, locked by the caller;
    a digest's delivery (its `digest` loaded) needs none.
    A delivery that left `source` meanwhile is not moved: the caller sees it
    missing from what comes back.
    """
    if not deliveries:
        return []
    payloads: dict[tuple[uuid.UUID, int | None], dict[str, Any]] = {}
    # Whom they mention, as the recipients are now (a person who withdrew their consent is not
    # mentioned again): one query, none when no destination of theirs mentions.
    mentions = recipients_mentions(
        user_ids={event.user_id for event in events.values()},
        destinations=[d.destination for d in deliveries if d.destination and d.event_id is not None],
    )
    bodies = [
        _requeued_body(
            delivery=delivery, events=events, templates=templates, payloads=payloads, mentions=mentions
        )
        for delivery in deliveries
    ]
    # A delivery whose destination was deleted goes where it went.
    keys = [d.destination.url_key if d.destination else d.endpoint_key for d in deliveries]
    budgets = [d.attempts + settings.DELIVERY_MAX_ATTEMPTS for d in deliveries]
    if source == DeliveryStatus.DELIVERED:
        # Queued again, it no longer says how it was delivered: a success recorded on it becomes its attempt row.
        successes_log(delivery_ids=[d.id for d in deliveries])
    moved = deliveries_transition(
        source=source,
        target=DeliveryStatus.QUEUED,
        select=Rows(
            ids=[d.id for d in deliveries],
            attempts=[d.attempts for d in deliveries],
            values={"payload": bodies, "endpoint_key": keys, "max_attempts": budgets},
        ),
        now=now,
        # Queued again, it is not delivered (yet): the first acceptance stays in the attempt log.
        changes={"last_error": "", "next_attempt_at": now, "requeued_at": now, "delivered_at": None},
    )
    return [row[0] for row in moved]


def _requeued_body(
    *,
    delivery: Delivery,
    events: Mapping[uuid.UUID, Event],
    templates: MessageTemplates,
    payloads: dict[tuple[uuid.UUID, int | None], dict[str, Any]],
    mentions: MentionsByFormat,
) -> dict[str, Any]:
    """What `delivery` sends again, rendered now; `payloads` keeps each (event, destination)'s standard body."""
    destination = delivery.destination
    if delivery.digest_id is not None:
        # A digest goes again as it was built (its lines, less anyone erased since), in the
        # destination's kind as it is now; a deleted destination's, in the standard body.
        assert delivery.digest is not None  # loaded with it: the callers select_related("digest")
        return digest_body(
            digest=delivery.digest,
            format=destination.format if destination else STANDARD.name,
            mentions=digest_mentions(
                destination=destination,
                user_ids={entry["user_id"] for entry in delivery.digest.entries if entry.get("user_id")},
            ),
        )
    assert delivery.event_id is not None  # delivery_event_or_digest
    # Per destination: one with a text of its own gets it again.
    payload = payloads.get((delivery.event_id, delivery.destination_id))
    if payload is None:
        payload = payloads[(delivery.event_id, delivery.destination_id)] = event_payload(
            event=events[delivery.event_id], templates=templates, destination=destination
        )
    # A delivery whose destination was deleted goes in the standard format.
    if destination is None:
        return payload
    mention = mention_for(
        mentions=mentions, destination=destination, user_id=events[delivery.event_id].user_id
    )
    return kind_for(destination.format).body(payload, mention=mention)


def events_reopen(*, events: Sequence[Event], now: datetime | None = None) -> None:
    """Take ended events (FAILED or COMPLETED, locked by the caller) back to PROCESSING: a delivery goes again.

    An event still PROCESSING (another destination's delivery is under way)
    simply stays so.
    """
    for source in (EventStatus.FAILED, EventStatus.COMPLETED):
        events_transition(
            events=[event for event in events if event.status == source],
            source=source,
            target=EventStatus.PROCESSING,
            actor=Actor.OPERATOR,
            now=now,
            changes={"failure_reason": ""},
        )
