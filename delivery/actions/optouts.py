"""A person's opt-out of one destination: set it, read it, and the signed one-click link that sets it.

An opt-out is the person's say over one shared destination ("not in #general"), beside their
visibility, which speaks for every destination at once (scheduling.celebration). Setting one
takes effect for everything not yet sent, in the same transaction: what is queued there for
them is withdrawn (delivery.dispatch.withdraw), and the claim and the digests read the row for
everything after (delivery.dispatch.claim, delivery.dispatch.digests).

The unsubscribe token names a (person, destination) pair and is signed with the secret key
(django.core.signing), so nothing is stored per mail. It never expires: RFC 8058 asks that a
List-Unsubscribe link work whenever the person uses it, and a birthday mail is read a year later.
It is no credential for anything else: it can only ever opt that person out of that destination.
"""

from __future__ import annotations

import functools
import logging
import uuid
from datetime import datetime

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from delivery.dispatch.withdraw import deliveries_withdraw_opted_out
from delivery.models import Destination, DestinationOptOut
from scheduling.celebration import ChangedBy
from users.models import CelebrationChange, User

logger = logging.getLogger(__name__)

_UNSUBSCRIBE_SALT = "delivery.destinations.optouts.unsubscribe"


def destination_opt_out_set(
    *,
    user: User,
    destination: Destination,
    opted_out: bool,
    changed_by: ChangedBy,
    actor: str = "",
    now: datetime | None = None,
) -> bool:
    """Opt the person out of `destination` (or back in); whether anything changed. Idempotent.

    Under the person's row lock, as every change of their choices: a claim that read them
    before has committed, and what it queued is withdrawn here.
    """
    now = now or timezone.now()
    actor = "" if changed_by == ChangedBy.PERSON else actor
    with transaction.atomic():
        User.objects.select_for_update(no_key=True).filter(pk=user.pk).get()
        if opted_out:
            _row, changed = DestinationOptOut.objects.get_or_create(
                user=user,
                destination=destination,
                defaults={"created_at": now, "changed_by": changed_by, "actor": actor},
            )
        else:
            changed = bool(DestinationOptOut.objects.filter(user=user, destination=destination).delete()[0])
        if not changed:
            return False
        CelebrationChange.objects.create(
            user=user,
            changed_at=now,
            changed_by=changed_by,
            actor=actor,
            field="destination",
            destination_id=destination.pk,
            destination_name=destination.name,
            old_value="in" if opted_out else "out",
            new_value="out" if opted_out else "in",
        )
        if opted_out:
            deliveries_withdraw_opted_out(user_id=user.pk, destination=destination, now=now)
    logger.info(
        "A person opted %s a destination",
        "out of" if opted_out else "back into",
        extra={"user_id": str(user.pk), "destination_id": destination.pk, "changed_by": changed_by},
    )
    return True


def destination_opt_outs_of(*, user_id: uuid.UUID) -> set[int]:
    """The ids of the destinations the person opted out of."""
    return set(DestinationOptOut.objects.filter(user_id=user_id).values_list("destination_id", flat=True))


def unsubscribe_token(*, user_id: uuid.UUID, destination_id: int) -> str:
    """The signed token of a one-click unsubscribe of the person from the destination."""
    return signing.dumps([str(user_id), destination_id], salt=_UNSUBSCRIBE_SALT, compress=True)


def unsubscribe_token_read(*, token: str) -> tuple[uuid.UUID, int] | None:
    """The (person, destination) a token names; None for one not signed by us or malformed."""
    try:
        user_id, destination_id = signing.loads(token, salt=_UNSUBSCRIBE_SALT)
        return uuid.UUID(user_id), int(destination_id)
    except (signing.BadSignature, ValueError, TypeError):
        return None


def unsubscribe_url(*, user_id: uuid.UUID, destination_id: int) -> str:
    """The absolute one-click unsubscribe URL (RFC 8058's List-Unsubscribe), on PUBLIC_BASE_URL.

    Made once a message by the email transport: the path around the token is reversed once
    (reverse() costs as much as signing the token).
    """
    before, after = _path_around_token()
    token = unsubscribe_token(user_id=user_id, destination_id=destination_id)
    base: str = settings.PUBLIC_BASE_URL
    return base.rstrip("/") + before + token + after


@functools.cache
def _path_around_token() -> tuple[str, str]:
    marker = "TOKEN"
    before, _, after = reverse("people:unsubscribe", kwargs={"token": marker}).partition(marker)
    return before, after


def unsubscribe_pair(*, token: str) -> tuple[User, Destination] | None:
    """The person and the destination a token names; None if it names nothing that exists now."""
    named = unsubscribe_token_read(token=token)
    if named is None:
        return None
    user_id, destination_id = named
    user = User.objects.filter(pk=user_id).first()
    destination = Destination.objects.filter(pk=destination_id).first()
    if user is None or destination is None:
        return None
    return user, destination
