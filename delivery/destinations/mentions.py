"""Whom a destination's messages mention: the person each greets, where that person agreed.

A chat destination with `mention_recipient` mentions the person a message greets
(a digest: each person it names), by their user id at its kind's service (the
recipient's field its kind names, kinds.base.Kind.mention_field), if:

- they agreed: their own `mention_consent` when they have said, else the company's
  default, MENTIONS_BY_DEFAULT;
- and that id is set.

Nobody else is ever mentioned: the kinds escape whatever came from data. Read when a
body is rendered (the claim, a digest being built, a resend, a digest rendered again
after an erasure), from the recipients as they are then: a person who withdraws
their consent is not mentioned by a message rendered afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping

from django.conf import settings
from django.db.models import Q

from delivery.models import Destination
from kinds import Mention, kind_for
from users.models import User

# By a recipient's id (as text: a digest's entries hold it so), their mention at each format's service.
MentionsByFormat = Mapping[str, Mapping[str, Mention]]


def mentioning(destination: Destination | None) -> bool:
    """Whether `destination` mentions the people it greets (set so, and of a kind that can)."""
    return bool(
        destination is not None
        and destination.mention_recipient
        and kind_for(destination.format).mention_field
    )


def recipients_mentions(
    *, user_ids: Collection[uuid.UUID | str], destinations: Iterable[Destination]
) -> MentionsByFormat:
    """For the formats of `destinations` that mention, each of these recipients' mention there, if they agreed
    and have an id at that service: one query, none when no destination mentions."""
    fields = {
        destination.format: kind_for(destination.format).mention_field
        for destination in destinations
        if mentioning(destination)
    }
    if not fields or not user_ids:
        return {}
    agreed = Q(mention_consent=True)
    if settings.MENTIONS_BY_DEFAULT:
        agreed |= Q(mention_consent__isnull=True)
    has_an_id = Q()
    for field in set(fields.values()):
        has_an_id |= ~Q(**{field: ""})
    rows = (
        User.objects.filter(id__in=list(user_ids))
        .filter(agreed & has_an_id)
        .values("id", "first_name", "last_name", *set(fields.values()))
    )
    mentions: dict[str, dict[str, Mention]] = {format_: {} for format_ in fields}
    for row in rows:
        name = f"{row['first_name']} {row['last_name']}"
        for format_, field in fields.items():
            if row[field]:
                mentions[format_][str(row["id"])] = Mention(user_id=row[field], name=name)
    return mentions


def mention_for(
    *, mentions: MentionsByFormat, destination: Destination | None, user_id: uuid.UUID | str
) -> Mention | None:
    """The recipient's mention in `destination`'s messages, from `recipients_mentions`; None: nobody."""
    if not mentioning(destination):
        return None
    assert destination is not None  # mentioning
    return mentions.get(destination.format, {}).get(str(user_id))


def digest_mentions(*, destination: Destination | None, user_ids: Collection[str]) -> Mapping[str, Mention]:
    """The people of a digest (their ids) the destination's digest mentions, by their id: one query at most."""
    if not mentioning(destination):
        return {}
    assert destination is not None  # mentioning
    return recipients_mentions(user_ids=user_ids, destinations=[destination]).get(destination.format, {})
