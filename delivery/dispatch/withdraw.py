"""A narrower visibility takes effect for everything not yet begun (scheduling.celebration).

Called in the transaction of the change (a person's choice, through users.services, or a
company default, through scheduling.services.celebration; wired in delivery.signals), after
the person's row was locked:

- the deliveries of their occurrences still QUEUED that the visibility in force no longer
  allows (none: every one; private: every one to a destination that is not personal)
  are locked and deleted, their earlier attempts kept without their texts, as an erasure
  keeps them; a delivery a worker has taken (SENDING) is being sent and is not touched;
- an occurrence left with no delivery FAILS with the reason; one left with others is
  concluded as any other whose deliveries ended (delivery.states.conclude);
- the digests not yet sent that name them lose their line and are rendered again (none at
  all if they named no one else).

The scheduler's claim share-locks the person's row, so a claim that read the old choice
has committed before the change's lock is granted, and its deliveries are found here; a
digest being built locks the rows of the people it names, to the same end.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection
from datetime import datetime

from delivery.dispatch.digests import digest_entries_without, digest_rerender
from delivery.dispatch.payload import destination_payload, message_overrides
from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus, Destination
from delivery.states.conclude import events_conclude, events_fail_unsent
from kinds import STANDARD, kind_for
from runtime.sql import execute
from scheduling.admin_log import admin_log_forget
from scheduling.celebration import DEFAULT_VISIBILITY, NOT_CELEBRATED, Visibility
from scheduling.models import CelebrationDefault, Event
from scheduling.selectors import message_templates
from users.models import CelebrationChoice, User

logger = logging.getLogger(__name__)

# The reason of an occurrence whose every queued delivery a "private" withdrew.
PRIVATE_WITHDRAWN = "recipient celebrated privately: withdrawn from every destination that is not personal"

# The reason of an occurrence whose only queued delivery an opt-out of its destination withdrew.
OPTED_OUT = "recipient opted out of {name}: withdrawn before it was sent"

# The visibility in force for an occurrence, as the claim computes it, given the joins below.
_IN_FORCE = f"COALESCE(c.visibility, f.visibility, '{DEFAULT_VISIBILITY.value}')"


def deliveries_withdraw_uncelebrated(
    *, user_id: uuid.UUID | None, event_types: Collection[str], now: datetime
) -> int:
    """Withdraw what the visibility now in force no longer allows and is not yet sent; return the deliveries withdrawn.

    `user_id`: one person's; None: everyone's of `event_types` (a company default changed).
    """
    withdrawn = _queued_deliveries_lock(user_id=user_id, event_types=event_types)
    if withdrawn:
        ids = [delivery_id for delivery_id, _event_id, _visibility in withdrawn]
        DeliveryAttempt.objects.filter(delivery_id__in=ids).update(
            delivery=None, error="", response_excerpt=""
        )
        admin_log_forget(model=Delivery, object_ids=ids)
        Delivery.objects.filter(id__in=ids).delete()
        reasons = {
            event_id: NOT_CELEBRATED if visibility == Visibility.NONE else PRIVATE_WITHDRAWN
            for _delivery_id, event_id, visibility in withdrawn
        }
        events_fail_unsent(reasons=reasons, now=now)
        events_conclude(event_ids=list(reasons), now=now)
        logger.info(
            "Withdrew %s queued deliveries: their people are no longer celebrated there",
            len(ids),
            extra={"event_ids": [str(e) for e in list(reasons)[:20]]},
        )
    digests = _digests_take_out(user_id=user_id, event_types=event_types)
    return len(withdrawn) + digests


def deliveries_withdraw_opted_out(*, user_id: uuid.UUID, destination: Destination, now: datetime) -> int:
    """Withdraw what is queued to `destination` for the person and not yet sent; return what changed.

    For a person's opt-out of one destination (delivery.actions.optouts), in its transaction,
    after the person's row was locked. Their QUEUED deliveries there are deleted as a narrowed
    visibility deletes them (one SENDING is being sent and is left alone); its digests not yet
    sent lose their lines and are rendered again.
    """
    queued = list(
        Delivery.objects.select_for_update(of=("self",))
        .filter(status=DeliveryStatus.QUEUED, destination=destination, event__user_id=user_id)
        .order_by("id")
        .values_list("id", "event_id")
    )
    if queued:
        ids = [delivery_id for delivery_id, _event_id in queued]
        DeliveryAttempt.objects.filter(delivery_id__in=ids).update(
            delivery=None, error="", response_excerpt=""
        )
        admin_log_forget(model=Delivery, object_ids=ids)
        Delivery.objects.filter(id__in=ids).delete()
        reasons = {event_id: OPTED_OUT.format(name=destination.name) for _delivery_id, event_id in queued}
        events_fail_unsent(reasons=reasons, now=now)
        events_conclude(event_ids=list(reasons), now=now)
    changed = 0
    digests = (
        Delivery.objects.filter(
            digest__isnull=False,
            status=DeliveryStatus.QUEUED,
            destination=destination,
            digest__entries__contains=[{"user_id": str(user_id)}],
        )
        .select_for_update(of=("self",))
        .select_related("digest", "destination")
        .order_by("id")
    )
    for delivery in digests:
        digest = delivery.digest
        assert digest is not None  # a digest's delivery
        digest_rerender(
            delivery=delivery,
            digest=digest,
            entries=[entry for entry in digest.entries if entry["user_id"] != str(user_id)],
        )
        changed += 1
    return len(queued) + changed


def deliveries_rerender_without_age(*, user_id: uuid.UUID) -> int:
    """Render the person's QUEUED deliveries again from their row as it is now; return how many.

    For a person whose age is no longer said (scheduling.celebration.age_unsaid): a message
    queued before would state it. Same text choice as the claim's (message_choice), in each
    destination's format and with its own text; one being sent is not touched.
    """
    user = User.objects.get(pk=user_id)
    queued = list(
        Delivery.objects.select_for_update(of=("self",))
        .filter(status=DeliveryStatus.QUEUED, event__user_id=user_id)
        .select_related("event", "destination")
        .order_by("id")
    )
    if not queued:
        return 0
    templates = message_templates()
    overrides = message_overrides(destinations=[d.destination for d in queued if d.destination is not None])
    for delivery in queued:
        assert delivery.event is not None  # the person's occurrences' deliveries
        destination = delivery.destination
        payload = destination_payload(
            destination=destination,
            occurrence=delivery.event,
            recipient=user,
            templates=templates,
            override=overrides.get((destination.pk, delivery.event.event_type)) if destination else None,
        )
        delivery.payload = kind_for(destination.format if destination else STANDARD.name).body(payload)
        delivery.save(update_fields=["payload", "updated_at"])
    return len(queued)


def _queued_deliveries_lock(
    *, user_id: uuid.UUID | None, event_types: Collection[str]
) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
    """Lock the QUEUED deliveries now disallowed: (delivery id, event id, visibility in force), by delivery id.

    A delivery a worker is taking waits for it; once SENDING it no longer matches, and is left alone.
    """
    params: list[object] = [DeliveryStatus.QUEUED, list(event_types)]
    for_user = ""
    if user_id is not None:
        for_user = "AND e.user_id = %s "
        params.append(user_id)
    params += [Visibility.NONE, Visibility.PRIVATE]
    visibility = _IN_FORCE
    return [
        (delivery_id, event_id, in_force)
        for delivery_id, event_id, in_force in execute(
            f"SELECT d.id, d.event_id, {visibility} FROM {Delivery._meta.db_table} d "
            f"JOIN {Event._meta.db_table} e ON e.id = d.event_id "
            f"LEFT JOIN {Destination._meta.db_table} t ON t.id = d.destination_id "
            f"LEFT JOIN {CelebrationChoice._meta.db_table} c ON c.user_id = e.user_id AND c.event_type = e.event_type "
            f"LEFT JOIN {CelebrationDefault._meta.db_table} f ON f.event_type = e.event_type "
            "WHERE d.status = %s AND e.event_type = ANY(%s) "
            + for_user
            + f"AND ({visibility} = %s OR ({visibility} = %s AND NOT COALESCE(t.personal, false))) "
            "ORDER BY d.id FOR UPDATE OF d",
            params,
        )
    ]


def _digests_take_out(*, user_id: uuid.UUID | None, event_types: Collection[str]) -> int:
    """Take the people no longer celebrated publicly out of the digests not yet sent; return the digests changed."""
    queued = Delivery.objects.filter(digest__isnull=False, status=DeliveryStatus.QUEUED)
    if user_id is not None:
        queued = queued.filter(digest__entries__contains=[{"user_id": str(user_id)}])
    changed = 0
    for delivery in queued.select_for_update(of=("self",)).select_related("digest").order_by("id"):
        digest = delivery.digest
        assert digest is not None  # a digest's delivery
        kept = digest_entries_without(entries=digest.entries, event_types=event_types)
        if len(kept) == len(digest.entries):
            continue
        changed += 1
        digest_rerender(delivery=delivery, digest=digest, entries=kept)
    return changed
