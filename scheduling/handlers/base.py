"""What every event type must know: when it next happens and what it says."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import lru_cache
from typing import NamedTuple, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Q

from scheduling.times import time_of_day, wall_time_instant
from scheduling.zonedata import zone_cache


class Recipient(Protocol):
    """What a handler reads of a recipient: a users.User, or a row of its values on the bulk paths.

    Read-only properties, as a handler only reads them: a row (a NamedTuple) is a recipient too.
    Declared here, not taken from the recipient's fields (users.fields): scheduling sits
    beneath users and cannot import them. Instead the tests hold the two together: this
    protocol and RecipientRow name the same fields (scheduling/tests/test_handlers.py), and
    each is one of the recipient's (users/tests/test_fields.py).
    """

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def first_name(self) -> str: ...
    @property
    def last_name(self) -> str: ...
    @property
    def date_of_birth(self) -> date: ...
    @property
    def timezone(self) -> str: ...
    @property
    def anniversary_date(self) -> date | None: ...
    # The recipient's own local send time; None: the event type's default (send_time()).
    @property
    def send_time(self) -> time | None: ...
    # Never say their age (scheduling.celebration.age_said).
    @property
    def hide_age(self) -> bool: ...


class RecipientRow(NamedTuple):
    """A recipient as plain values, for the paths that move thousands (no model instances).

    Its fields are the recipient's columns the scheduler's claim reads, by name: Recipient's,
    written out again because a NamedTuple cannot be built from a protocol for a type checker.
    """

    id: uuid.UUID
    first_name: str
    last_name: str
    date_of_birth: date
    timezone: str
    anniversary_date: date | None
    send_time: time | None
    hide_age: bool


@dataclass(frozen=True)
class Occurrence:
    """A concrete instant at which an event is due, in UTC and in the user's zone."""

    occurrence_date: date
    target_utc: datetime
    target_local: datetime
    timezone_name: str


def send_time() -> time:
    """The default local send time (EVENT_SEND_TIME, HH:MM), for a recipient who has not chosen one."""
    return _parse_send_time(settings.EVENT_SEND_TIME)


@lru_cache(maxsize=8)
def _parse_send_time(value: str) -> time:
    at = time_of_day(value)
    if at is None:
        raise ImproperlyConfigured(
            f"EVENT_SEND_TIME must be a local time HH:MM, such as 09:00 (not {value!r})."
        )
    return at


def local_send_instant(occurrence_date: date, timezone_name: str, at: time | None = None) -> Occurrence:
    """Resolve the send time `at` (None: the default, send_time()) on a local date to a real instant.

    A wall time inside a DST gap moves forward by the gap, one in an overlap
    takes the first (scheduling.times.wall_time_instant).
    """
    return _local_send_instant(occurrence_date, timezone_name, at or send_time())


# The recipients claimed together share a handful of (date, zone) pairs (today's
# birthdays, a year on), so the scheduler's claim resolves each pair once
# instead of once per recipient. Occurrence is frozen, so sharing it is safe;
# the cache is dropped with the zones when the time zone database changes.
@zone_cache
@lru_cache(maxsize=16384)
def _local_send_instant(occurrence_date: date, timezone_name: str, at: time) -> Occurrence:
    target_utc, target_local = wall_time_instant(
        wall=datetime.combine(occurrence_date, at), timezone_name=timezone_name
    )
    return Occurrence(
        occurrence_date=occurrence_date,
        target_utc=target_utc,
        target_local=target_local,
        timezone_name=timezone_name,
    )


class EventHandler(Protocol):
    """One per event type, registered in scheduling.handlers.REGISTRY."""

    event_type: str
    # The default message, used while operators have not saved their own
    # (scheduling.models.MessageTemplate). Uses only names in `placeholders`.
    message_template: str
    # An email's default subject by language ("": every language without its own; "de": German), used
    # where the chosen template has no subject of its own (scheduling.selectors.subject_for). Uses only
    # names in `placeholders`, and no age placeholder.
    subject_templates: Mapping[str, str]
    # The names a message of this type may use ({first_name}, ...); templates
    # are validated against them when saved (scheduling.messages).
    placeholders: frozenset[str]
    # The recipients who have occurrences of this type (Q() for everyone), as a
    # filter on the recipient model, for the paths that look for them in SQL.
    applies_to: Q
    # The placeholders that state the recipient's age or birth year: a recipient whose age is
    # not said (scheduling.celebration.age_said) gets no value for them, and a text without them.
    age_placeholders: frozenset[str]

    def next_occurrence(
        self, *, user: Recipient, now: datetime, after_date: date | None = None
    ) -> Occurrence | None:
        """The first occurrence whose send time has not passed, after `after_date`.

        None if the recipient has no occurrence of this type (not in `applies_to`,
        such as no anniversary date): then they have no PENDING event of it.
        """

    def digest_line(self, *, user: Recipient, occurrence_date: date, language: str = "en") -> str:
        """The occurrence as one line of a destination's digest ("Ada Lovelace's birthday"), in `language`
        (en or de, a digest destination's; any other: English).

        Never the birth year nor the age: a digest is posted to a team's channel.
        """

    def message_values(self, *, user: Recipient, occurrence_date: date) -> dict[str, object]:
        """The value of every name in `placeholders`, for the user as they are now on this occurrence.

        But none of `age_placeholders` for a recipient whose age is not said.

        Called once per claimed event on the scheduler's claim: plain arithmetic
        on the arguments, never a query.
        """
