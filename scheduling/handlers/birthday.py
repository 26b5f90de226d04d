from __future__ import annotations

import calendar
from datetime import date, datetime

from scheduling.handlers.base import Occurrence, Recipient, local_send_instant
from scheduling.models import EventType
from scheduling.timezones import load_timezone


def birthday_in_year(date_of_birth: date, year: int) -> date:
    """The day a birthday is celebrated in `year`: Feb 29 falls on Feb 28 in common years."""
    if (date_of_birth.month, date_of_birth.day) == (2, 29) and not calendar.isleap(year):
        return date(year, 2, 28)
    return date_of_birth.replace(year=year)


class BirthdayHandler:
    event_type = EventType.BIRTHDAY
    message_template = "Hey, {first_name} {last_name} it's your birthday"

    def next_occurrence(
        self, *, user: Recipient, now: datetime, after_date: date | None = None
    ) -> Occurrence:
        # Start a year before the user's local year so zones far ahead of or
        # behind UTC (Kiritimati, Pago Pago) never miss an occurrence at the
        # turn of the year; the first birthday is the one after the birth date.
        first_year = max(user.date_of_birth.year + 1, now.astimezone(load_timezone(user.timezone)).year - 1)
        if after_date is not None:
            first_year = max(first_year, after_date.year)
        for year in range(first_year, first_year + 10):
            occurrence = local_send_instant(
                birthday_in_year(user.date_of_birth, year), user.timezone
            )
            if after_date is not None and occurrence.occurrence_date <= after_date:
                continue
            if occurrence.target_utc >= now:
                return occurrence
        raise AssertionError("a birthday occurs every year")  # pragma: no cover

    def render_message(self, *, user: Recipient) -> str:
        return self.message_template.format(
            first_name=user.first_name, last_name=user.last_name
        )
