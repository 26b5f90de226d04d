"""Wedding anniversaries: yearly on the wedding date, for the recipients who have one."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from types import MappingProxyType

from django.db.models import Q

from scheduling.event_types import EventType
from scheduling.handlers.base import Recipient
from scheduling.handlers.birthday import YearlyHandler


class AnniversaryHandler(YearlyHandler):
    event_type: str = EventType.ANNIVERSARY
    message_template = "Hey, {first_name} {last_name} happy anniversary"
    subject_templates: Mapping[str, str] = MappingProxyType(
        {"": "Happy anniversary, {first_name}!", "de": "Alles Gute zum Hochzeitstag, {first_name}!"}
    )
    placeholders = frozenset({"first_name", "last_name", "years"})
    applies_to = Q(anniversary_date__isnull=False)
    # The years married are not the person's age; a wedding date always has its year.
    age_placeholders: frozenset[str] = frozenset()

    def yearly_date(self, user: Recipient) -> date | None:
        # The same arithmetic as a birthday's: a Feb 29 wedding is remembered
        # on Feb 28 in common years, and the wedding day itself is not one.
        return user.anniversary_date

    def digest_line(self, *, user: Recipient, occurrence_date: date, language: str = "en") -> str:
        assert user.anniversary_date is not None  # as in message_values: only then is there an event
        years = occurrence_date.year - user.anniversary_date.year
        if language == "de":
            return (
                f"{user.first_name} {user.last_name}, {years} {'Jahr' if years == 1 else 'Jahre'} verheiratet"
            )
        return f"{user.first_name} {user.last_name}, {years} year{'s' if years != 1 else ''} married"

    def message_values(self, *, user: Recipient, occurrence_date: date) -> dict[str, object]:
        # Only a recipient with an anniversary date has an anniversary event:
        # clearing the date removes the pending one in the same transaction.
        assert user.anniversary_date is not None
        return {
            "first_name": user.first_name,
            "last_name": user.last_name,
            "years": occurrence_date.year - user.anniversary_date.year,
        }
