"""What every event type must know: when it next happens and what it says."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from functools import lru_cache
from typing import NamedTuple, Protocol

from django.conf import settings

from scheduling.timezones import load_timezone


class Recipient(Protocol):
    """What a handler reads of a recipient: a users.User, or a RecipientRow on the bulk paths."""

    id: uuid.UUID
    first_name: str
    last_name: str
    date_of_birth: date
    timezone: str


class RecipientRow(NamedTuple):
    """A recipient as plain values, for the paths that move thousands (no model instances)."""

    id: uuid.UUID
    first_name: str
    last_name: str
    date_of_birth: date
    timezone: str


@dataclass(frozen=True)
class Occurrence:
    """A concrete instant at which an event is due, in UTC and in the user's zone."""

    occurrence_date: date
    target_utc: datetime
    target_local: datetime
    timezone_name: str


def send_time() -> time:
    """The configured local send time (EVENT_SEND_TIME, HH:MM)."""
    return _parse_send_time(settings.EVENT_SEND_TIME)


@lru_cache(maxsize=8)
def _parse_send_time(value: str) -> time:
    return time.fromisoformat(value)


def local_send_instant(occurrence_date: date, timezone_name: str) -> Occurrence:
    """Resolve the send time on a local date to a real instant.

    A wall time that does not exist (inside a DST gap) moves forward by the gap:
    with fold=0 zoneinfo applies the offset in force before the transition, so
    02:30 on a spring-forward night becomes 03:30. A wall time that happens twice
    (DST overlap) takes the first, which is also fold=0.
    """
    return _local_send_instant(occurrence_date, timezone_name, send_time())


# The recipients claimed together share a handful of (date, zone) pairs (today's
# birthdays, a year on), so the scheduler's claim resolves each pair once
# instead of once per recipient. Occurrence is frozen, so sharing it is safe.
@lru_cache(maxsize=16384)
def _local_send_instant(occurrence_date: date, timezone_name: str, at: time) -> Occurrence:
    zone = load_timezone(timezone_name)
    wall = datetime.combine(occurrence_date, at).replace(tzinfo=zone, fold=0)
    target_utc = wall.astimezone(UTC)
    return Occurrence(
        occurrence_date=occurrence_date,
        target_utc=target_utc,
        target_local=target_utc.astimezone(zone),
        timezone_name=timezone_name,
    )


class EventHandler(Protocol):
    """One per event type, registered in scheduling.handlers.REGISTRY."""

    event_type: str

    def next_occurrence(
        self, *, user: Recipient, now: datetime, after_date: date | None = None
    ) -> Occurrence:
        """The first occurrence whose send time has not passed, after `after_date`."""

    def render_message(self, *, user: Recipient) -> str:
        """The message text, rendered from the user as they are now."""
