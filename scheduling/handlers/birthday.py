from __future__ import annotations

import abc
import calendar
from collections.abc import Mapping
from datetime import date, datetime, time
from types import MappingProxyType

from django.db.models import Q

from scheduling.celebration import age_said
from scheduling.event_types import EventType
from scheduling.handlers.base import Occurrence, Recipient, local_send_instant, send_time
from scheduling.times import load_timezone


def birthday_in_year(date_of_birth: date, year: int) -> date:
    """The day a birthday (or any yearly date) is celebrated in `year`: Feb 29 falls on Feb 28 in common years."""
    if (date_of_birth.month, date_of_birth.day) == (2, 29) and not calendar.isleap(year):
        return date(year, 2, 28)
    return date_of_birth.replace(year=year)


def next_yearly_occurrence(
    *, since: date, timezone_name: str, at: time | None, now: datetime, after_date: date | None = None
) -> Occurrence:
    """The first yearly return of the day `since` (a birth, a wedding) whose send time `at` (None:
    the default) has not passed, after `after_date`. The day itself is not one: the first is a year later.
    """
    # Start a year before the user's local year so zones far ahead of or
    # behind UTC (Kiritimati, Pago Pago) never miss an occurrence at the
    # turn of the year.
    first_year = max(since.year + 1, now.astimezone(load_timezone(timezone_name)).year - 1)
    if after_date is not None:
        first_year = max(first_year, after_date.year)
    # The default resolved once, not once a year tried: it is a settings read, and
    # the bulk import and the claim call this for every recipient they move.
    at = at or send_time()
    for year in range(first_year, first_year + 10):
        occurrence = local_send_instant(birthday_in_year(since, year), timezone_name, at)
        if after_date is not None and occurrence.occurrence_date <= after_date:
            continue
        if occurrence.target_utc >= now:
            return occurrence
    raise AssertionError("a yearly date occurs every year")  # pragma: no cover


class YearlyHandler(abc.ABC):
    """A handler whose occurrences return each year on a date of the recipient's (a birth, a wedding)."""

    @abc.abstractmethod
    def yearly_date(self, user: Recipient) -> date | None:
        """The recipient's date this type returns on; None: they have none, so no occurrence."""

    def next_occurrence(
        self, *, user: Recipient, now: datetime, after_date: date | None = None
    ) -> Occurrence | None:
        since = self.yearly_date(user)
        if since is None:
            return None
        return next_yearly_occurrence(
            since=since, timezone_name=user.timezone, at=user.send_time, now=now, after_date=after_date
        )


class BirthdayHandler(YearlyHandler):
    event_type: str = EventType.BIRTHDAY
    message_template = "Hey, {first_name} {last_name} it's your birthday"
    subject_templates: Mapping[str, str] = MappingProxyType(
        {"": "Happy birthday, {first_name}!", "de": "Alles Gute zum Geburtstag, {first_name}!"}
    )
    placeholders = frozenset({"first_name", "last_name", "age"})
    applies_to = Q()  # everyone has a date of birth
    age_placeholders = frozenset({"age"})

    def yearly_date(self, user: Recipient) -> date:
        return user.date_of_birth

    def digest_line(self, *, user: Recipient, occurrence_date: date, language: str = "en") -> str:
        # No age: a digest goes to a channel, where a birthday is a greeting, not a figure.
        if language == "de":
            return f"Geburtstag von {user.first_name} {user.last_name}"
        return f"{user.first_name} {user.last_name}'s birthday"

    def message_values(self, *, user: Recipient, occurrence_date: date) -> dict[str, object]:
        # The occurrence is the birthday in its own year (Feb 28 for a Feb 29
        # birthday in a common year), so the age reached is the years between; none for a
        # birthday without a year, or a person who chose never to have it said.
        values: dict[str, object] = {"first_name": user.first_name, "last_name": user.last_name}
        if age_said(user):
            values["age"] = occurrence_date.year - user.date_of_birth.year
        return values
