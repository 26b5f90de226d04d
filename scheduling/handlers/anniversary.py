"""Wedding anniversaries: yearly on the wedding date, for the recipients who have one."""

from __future__ import annotations

from datetime import date, datetime

from django.db.models import Q

from scheduling.event_types import EventType
from scheduling.handlers.base import Occurrence, Recipient
from scheduling.handlers.birthday import next_yearly_occurrence


class AnniversaryHandler:
    event_type: str = EventType.ANNIVERSARY
    message_template = "Hey, {first_name} {last_name} happy anniversary"
    placeholders = frozenset({"first_name", "last_name", "years"})
    applies_to = Q(anniversary_date__isnull=False)

    def next_occurrence(
        self, *, user: Recipient, now: datetime, after_date: date | None = None
    ) -> Occurrence | None:
        if user.anniversary_date is None:
            return None
        # The same arithmetic as a birthday's: a Feb 29 wedding is remembered
        # on Feb 28 in common years, and the wedding day itself is not one.
        return next_yearly_occurrence(
            since=user.anniversary_date,
            timezone_name=user.timezone,
            at=user.send_time,
            now=now,
            after_date=after_date,
        )

    def message_values(self, *, user: Recipient, occurrence_date: date) -> dict[str, object]:
        # Only a recipient with an anniversary date has an anniversary event:
        # clearing the date removes the pending one in the same transaction.
        assert user.anniversary_date is not None
        return {
            "first_name": user.first_name,
            "last_name": user.last_name,
            "years": occurrence_date.year - user.anniversary_date.year,
        }
