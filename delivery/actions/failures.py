"""An operator's actions on a group of failures (one destination, one cause): acknowledge it, or resend it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from delivery.actions.resend import delivery_resend
from delivery.models import Destination, FailureAcknowledgement
from delivery.rules import failure_causes as failures
from delivery.selectors import failure_group_deliveries
from scheduling.exceptions import InvalidStateTransition

logger = logging.getLogger(__name__)

# The most deliveries one resend of a group queues again: each is its own short transaction, in
# the operator's web request. A larger group is resent in turns (the answer says how many remain),
# or, for a whole window of a destination, by a Recover.
RESEND_AT_ONCE = 500


class UnknownCause(ValueError):
    """The cause named is none that delivery.rules.failure_causes produces."""


def failure_group_acknowledge(
    *, destination: Destination, cause: str, through: datetime, operator: str, now: datetime
) -> FailureAcknowledgement:
    """Acknowledge the group's dead deliveries given up until `through` (never later than now).

    One statement, so two operators acknowledging at once both succeed and the
    later `through` wins; an acknowledgement never moves back.
    """
    if not failures.is_cause(cause):
        raise UnknownCause(f"Unknown cause {cause!r}.")
    through = min(through, now)
    table = FailureAcknowledgement._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (destination_id, cause, through, acknowledged_by, acknowledged_at)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (destination_id, cause) DO UPDATE
            SET through = GREATEST({table}.through, EXCLUDED.through),
                acknowledged_by = EXCLUDED.acknowledged_by,
                acknowledged_at = EXCLUDED.acknowledged_at
            RETURNING id
            """,
            [destination.pk, cause, through, operator, now],
        )
        (ack_id,) = cursor.fetchone()
    logger.info(
        "Operator %s acknowledged failures %s of destination %s",
        operator,
        cause,
        destination.name,
        extra={
            "operator": operator,
            "destination_id": destination.pk,
            "cause": cause,
            "through": through.isoformat(),
        },
    )
    return FailureAcknowledgement.objects.get(pk=ack_id)


@dataclass(frozen=True)
class GroupResend:
    resent: int
    refused: int  # changed meanwhile (resent by someone else, or its event is gone)
    remaining: int  # still dead in the group after this turn (more than RESEND_AT_ONCE)


def failure_group_resend(
    *, destination: Destination, cause: str, operator: str, now: datetime
) -> GroupResend:
    """Queue the group's dead deliveries again (each as the console's Resend does), RESEND_AT_ONCE at most."""
    if not failures.is_cause(cause):
        raise UnknownCause(f"Unknown cause {cause!r}.")
    deliveries = list(
        failure_group_deliveries(destination_id=destination.pk, cause=cause, now=now).select_related("event")[
            : RESEND_AT_ONCE + 1
        ]
    )
    turn, more = deliveries[:RESEND_AT_ONCE], len(deliveries) > RESEND_AT_ONCE
    resent = refused = 0
    for delivery in turn:
        try:
            delivery_resend(delivery=delivery, operator=operator)
        except InvalidStateTransition:
            refused += 1
        else:
            resent += 1
    remaining = (
        failure_group_deliveries(destination_id=destination.pk, cause=cause, now=now).count() if more else 0
    )
    logger.info(
        "Operator %s resent %s failures %s of destination %s",
        operator,
        resent,
        cause,
        destination.name,
        extra={"operator": operator, "destination_id": destination.pk, "cause": cause, "resent": resent},
    )
    return GroupResend(resent=resent, refused=refused, remaining=remaining)
