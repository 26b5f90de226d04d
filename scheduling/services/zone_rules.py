"""Moving the PENDING events to the rules of a newer time zone database.

Governments change their clocks (Asia/Almaty from UTC+6 to UTC+5 in 2024,
Mexico without daylight saving time from 2022), and an event's instant was
computed, up to a year ahead, by the rules its process had loaded then. A
scheduler whose database is newer than the one the events follow
(scheduling.models.EventZoneData) recomputes every PENDING event's instant
from its stored local wall time and zone, and writes only the rows whose
instant changes: same occurrence, same idempotency key, version bumped, as
event_reschedule does. A batch is one short transaction: it locks the one
EventZoneData row (so schedulers side by side share a pass, batch after
batch, instead of each doing all of it), reads the next events in the
claim's order (target time, id) from where the pass stands, moves the
changed ones in one UPDATE that matches each on (id, PENDING, version), so
an event claimed or edited meanwhile is left to whoever changed it, and
records where the pass stands. In target order, the events due soonest move
first, before the claims that follow reach them.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple
from zoneinfo import ZoneInfoNotFoundError

from django.db import connection, transaction
from django.utils import timezone

from runtime.sql import column_field, execute, rows_relation
from scheduling.models import Event, EventStatus, EventZoneData
from scheduling.times import wall_time_instant
from scheduling.zonedata import zone_data

logger = logging.getLogger(__name__)

# Events read per transaction. The UPDATE holds the changed rows' locks until
# the commit, and a claim skips locked rows, so a batch stays short.
BATCH_SIZE = 5000
_IANA_VERSION = re.compile(r"^(\d{4})([a-z]+)$")


class PendingInstantRow(NamedTuple):
    """A PENDING event's instant as a batch reads it: its fields are the columns read, in their order."""

    id: uuid.UUID
    version: int
    target_timestamp_utc: datetime
    target_timezone: str
    target_timestamp_local: str


class RulesChange(NamedTuple):
    """What the rules now loaded make of a stored local time whose instant they change."""

    # The instant the stored local text names (its offset is the old rules').
    stored_instant: datetime
    target_timestamp_utc: datetime
    target_timestamp_local: str


class MovedEventRow(NamedTuple):
    """An event's new instant, for the set-based UPDATE: its fields are the columns matched and written."""

    id: uuid.UUID
    version: int
    target_timestamp_utc: datetime
    target_timestamp_local: str


# The model fields of the columns the pass reads and writes, by name: their
# database types adapt its parameters.
_EVENT_FIELDS = {
    name: column_field(Event, name)
    for name in (*PendingInstantRow._fields, *MovedEventRow._fields, "updated_at")
}


@dataclass
class ZoneRulesPass:
    """What one call did: the events it moved per zone, and whether every PENDING event now follows `version`."""

    version: str | None
    moved: Counter[str] = field(default_factory=Counter)
    complete: bool = True


def _version_key(version: str) -> tuple[int, int, str] | None:
    # IANA versions are a year and letters: 2024a < 2024b < 2025a (and "z" < "za").
    match = _IANA_VERSION.match(version)
    return (int(match.group(1)), len(match.group(2)), match.group(2)) if match else None


def _is_older(version: str, than: str) -> bool:
    mine, theirs = _version_key(version), _version_key(than)
    return mine is not None and theirs is not None and mine < theirs


def _change_by_current_rules(*, zone: str, local: str) -> RulesChange | None:
    """How the rules now loaded change the instant of a stored local time in `zone`; None if they do not.

    Raises ZoneInfoNotFoundError for a zone the database does not have (any
    more), ValueError for text that is no time.
    """
    stored = datetime.fromisoformat(local)
    # The wall time as stored. One that fell in a DST gap was stored moved
    # forward (03:30 for 02:30) and stays so: the send time it came from is
    # not stored, and the wall time the event was announced at is this one.
    target_utc, target_local = wall_time_instant(wall=stored.replace(tzinfo=None), timezone_name=zone)
    text = target_local.isoformat()
    return None if text == local else RulesChange(stored, target_utc, text)


def _batch(*, after_target: datetime, after_id: uuid.UUID, batch_size: int) -> list[PendingInstantRow]:
    # The partial index of the claim (event_pending_due_idx) holds exactly the
    # PENDING rows in target order; the plain `>=` lets PostgreSQL start the
    # index scan there, the row comparison breaks ties between equal targets.
    table = Event._meta.db_table
    target = _EVENT_FIELDS["target_timestamp_utc"].field.get_db_prep_value(after_target, connection)
    columns = ", ".join(_EVENT_FIELDS[name].column for name in PendingInstantRow._fields)
    rows = execute(
        f"SELECT {columns} FROM {table} "
        "WHERE status = %s AND target_timestamp_utc >= %s AND (target_timestamp_utc, id) > (%s, %s) "
        "ORDER BY target_timestamp_utc, id LIMIT %s",
        [
            EventStatus.PENDING.value,
            target,
            target,
            _EVENT_FIELDS["id"].field.get_db_prep_value(after_id, connection),
            batch_size,
        ],
        # Decoded in C: as text, every timestamp of the batch would be parsed in
        # Python, which costs more than all the rest the pass does with it.
        binary=True,
    )
    return list(map(PendingInstantRow._make, rows))


def _move(*, rows: list[MovedEventRow], now: datetime) -> Counter[str]:
    """Move the events in `rows` to their new instants if still PENDING at the version read; count them by zone."""
    if not rows:
        return Counter()
    relation, params = rows_relation(
        "v", [(f"v_{name}", _EVENT_FIELDS[name].field) for name in MovedEventRow._fields], rows
    )
    moved = execute(
        f"UPDATE {Event._meta.db_table} AS e SET target_timestamp_utc = v.v_target_timestamp_utc, "
        "target_timestamp_local = v.v_target_timestamp_local, "
        f"version = e.version + 1, updated_at = %s FROM {relation} "
        "WHERE e.id = v.v_id AND e.status = %s AND e.version = v.v_version RETURNING target_timezone",
        [
            _EVENT_FIELDS["updated_at"].field.get_db_prep_value(now, connection),
            *params,
            EventStatus.PENDING.value,
        ],
    )
    return Counter(zone for (zone,) in moved)


class _CurrentRules:
    """The rules now loaded, applied to one call's events.

    Each (zone, stored local time) is resolved once, each zone they cannot resolve logged once.
    """

    def __init__(self, *, version: str) -> None:
        self.version = version
        self.changes: dict[tuple[str, str], RulesChange | None] = {}
        self.unknown: set[str] = set()

    def moves(self, *, events: list[PendingInstantRow]) -> list[MovedEventRow]:
        """The new instants of the events in `events` that these rules change."""
        moves = []
        for event in events:
            key = (event.target_timezone, event.target_timestamp_local)
            if key not in self.changes:
                self.changes[key] = self._change_if_resolvable(zone=key[0], local=key[1])
            change = self.changes[key]
            # Only an instant its local time describes was computed from it:
            # one set otherwise (a hand-made fix in SQL) is left as it is.
            if change is not None and change.stored_instant == event.target_timestamp_utc:
                moves.append(
                    MovedEventRow(
                        event.id, event.version, change.target_timestamp_utc, change.target_timestamp_local
                    )
                )
        return moves

    def _change_if_resolvable(self, *, zone: str, local: str) -> RulesChange | None:
        """The change these rules make to `local` in `zone`; None, logged once per zone, for one they cannot resolve."""
        try:
            return _change_by_current_rules(zone=zone, local=local)
        except (ValueError, ZoneInfoNotFoundError):
            if zone not in self.unknown:
                self.unknown.add(zone)
                logger.warning(
                    "PENDING events in a zone the time zone data cannot resolve are left as they are",
                    extra={"timezone": zone, "zone_data": self.version},
                )
            return None


def _ahead_of(*, state: EventZoneData, version: str) -> str | None:
    """The newer version the events follow, or are being moved to, than `version`; None if not."""
    ahead = state.pass_version or state.version
    return ahead if ahead and ahead != version and _is_older(version, ahead) else None


def _pass_start(*, state: EventZoneData, version: str) -> None:
    now = timezone.now()
    logger.info(
        "Recomputing PENDING events with time zone data %s (they follow %s)",
        version,
        state.version or "unknown data",
    )
    state.pass_version, state.pass_after_target, state.pass_after_id = version, now, uuid.UUID(int=0)
    state.moved, state.pass_started_at, state.pass_completed_at = {}, now, None


def _pass_batch(*, state: EventZoneData, current_rules: _CurrentRules, batch_size: int) -> Counter[str]:
    """Move the next batch of the pass; record where it stands, or that it is complete."""
    # A pass under way has its position (_pass_start sets it; only its end clears it).
    assert state.pass_after_target is not None and state.pass_after_id is not None
    events = _batch(after_target=state.pass_after_target, after_id=state.pass_after_id, batch_size=batch_size)
    moved = _move(rows=current_rules.moves(events=events), now=timezone.now())
    state.moved = dict(Counter(state.moved) + moved)
    if len(events) < batch_size:
        state.version, state.pass_version = state.pass_version, ""
        state.pass_after_target = state.pass_after_id = None
        state.pass_completed_at = timezone.now()
    else:
        last = events[-1]
        state.pass_after_target, state.pass_after_id = last.target_timestamp_utc, last.id
    state.save()
    return moved


def events_follow_zone_data(*, seconds: float | None = None, batch_size: int = BATCH_SIZE) -> ZoneRulesPass:
    """Recompute the PENDING events' instants if they follow an older time zone database than this process's.

    Batch after batch for about `seconds` (None: until the pass is complete).
    A pass starts at the events not yet due: those already due are claimed as
    they are (an operator's "deliver now" among them). An event the new rules
    make due at once is simply due. A process with an older database than the
    events follow moves nothing: rules only go forward.
    """
    version = zone_data().version
    result = ZoneRulesPass(version=version)
    if version is None:
        logger.warning("The time zone data has no version: PENDING events are not recomputed")
        return result
    started = time.monotonic()
    current_rules = _CurrentRules(version=version)
    while True:
        with transaction.atomic():
            state, _ = EventZoneData.objects.select_for_update().get_or_create(pk=1)
            if state.version == version:
                return result
            ahead = _ahead_of(state=state, version=version)
            if ahead is not None:
                logger.warning(
                    "This process's time zone data %s is older than the %s the PENDING events follow: "
                    "the events it creates follow the older rules until its zone data is updated",
                    version,
                    ahead,
                )
                return result
            if state.pass_version != version:
                _pass_start(state=state, version=version)
            result.moved.update(_pass_batch(state=state, current_rules=current_rules, batch_size=batch_size))
        if not state.pass_version:
            logger.info(
                "Every PENDING event follows time zone data %s: %s moved%s",
                version,
                sum(state.moved.values()),
                "".join(f", {zone} {count}" for zone, count in sorted(state.moved.items())),
                extra={"moved_by_zone": state.moved},
            )
            return result
        if seconds is not None and time.monotonic() - started >= seconds:
            result.complete = False
            return result
