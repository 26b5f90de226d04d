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
from zoneinfo import ZoneInfoNotFoundError

from django.db import connection, transaction
from django.utils import timezone

from runtime.sql import execute, rows_relation
from scheduling.handlers import wall_time_instant
from scheduling.models import Event, EventStatus, EventZoneData
from scheduling.zonedata import zone_data

logger = logging.getLogger(__name__)

# Events read per transaction. The UPDATE holds the changed rows' locks until
# the commit, and a claim skips locked rows, so a batch stays short.
BATCH_SIZE = 5000
_IANA_VERSION = re.compile(r"^(\d{4})([a-z]+)$")

_F = {name: Event._meta.get_field(name) for name in (
    "id", "version", "target_timestamp_utc", "target_timezone", "target_timestamp_local", "updated_at",
)}


@dataclass
class ZoneRulesPass:
    """What one call did: the events it moved per zone, and whether every PENDING event now follows `version`."""

    version: str | None
    moved: Counter = field(default_factory=Counter)
    complete: bool = True


def _version_key(version: str) -> tuple | None:
    # IANA versions are a year and letters: 2024a < 2024b < 2025a (and "z" < "za").
    match = _IANA_VERSION.match(version)
    return (int(match.group(1)), len(match.group(2)), match.group(2)) if match else None


def _is_older(version: str, than: str) -> bool:
    mine, theirs = _version_key(version), _version_key(than)
    return mine is not None and theirs is not None and mine < theirs


def _resolve(zone: str, local: str) -> tuple[datetime, datetime, str] | None:
    """The instant a stored local time stands for, and its instant and text by the rules now loaded.

    None if they are the same. Raises ZoneInfoNotFoundError for a zone the
    database does not have (any more), ValueError for text that is no time.
    """
    stored = datetime.fromisoformat(local)
    # The wall time as stored. One that fell in a DST gap was stored moved
    # forward (03:30 for 02:30) and stays so: the send time it came from is
    # not stored, and the wall time the event was announced at is this one.
    target_utc, target_local = wall_time_instant(wall=stored.replace(tzinfo=None), timezone_name=zone)
    text = target_local.isoformat()
    return None if text == local else (stored, target_utc, text)


def _batch(*, after_target: datetime, after_id: uuid.UUID, batch_size: int) -> list[tuple]:
    # The partial index of the claim (event_pending_due_idx) holds exactly the
    # PENDING rows in target order; the plain `>=` lets PostgreSQL start the
    # index scan there, the row comparison breaks ties between equal targets.
    table = Event._meta.db_table
    target = _F["target_timestamp_utc"].get_db_prep_value(after_target, connection)
    return execute(
        f"SELECT id, version, target_timestamp_utc, target_timezone, target_timestamp_local FROM {table} "
        "WHERE status = %s AND target_timestamp_utc >= %s AND (target_timestamp_utc, id) > (%s, %s) "
        "ORDER BY target_timestamp_utc, id LIMIT %s",
        [EventStatus.PENDING.value, target, target, _F["id"].get_db_prep_value(after_id, connection), batch_size],
        # Decoded in C: parsing a batch's timestamps from text was most of the pass's Python time.
        binary=True,
    )


def _move(*, rows: list[tuple], now: datetime) -> Counter:
    """Move the events in `rows` (id, version, new UTC, new local text) if still PENDING at that version."""
    if not rows:
        return Counter()
    relation, params = rows_relation(
        "v",
        [("v_id", _F["id"]), ("v_version", _F["version"]), ("v_utc", _F["target_timestamp_utc"]),
         ("v_local", _F["target_timestamp_local"])],
        rows,
    )
    moved = execute(
        f"UPDATE {Event._meta.db_table} AS e SET target_timestamp_utc = v.v_utc, target_timestamp_local = v.v_local, "
        f"version = e.version + 1, updated_at = %s FROM {relation} "
        "WHERE e.id = v.v_id AND e.status = %s AND e.version = v.v_version RETURNING target_timezone",
        [_F["updated_at"].get_db_prep_value(now, connection), *params, EventStatus.PENDING.value],
    )
    return Counter(zone for (zone,) in moved)


class _Resolver:
    """The moves of one call: each (zone, stored local time) resolved once, each unknown zone logged once."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.resolved: dict[tuple[str, str], tuple[datetime, datetime, str] | None] = {}
        self.unknown: set[str] = set()

    def changes(self, events: list[tuple]) -> list[tuple]:
        """(id, version, new UTC, new local text) of the events in `events` whose instant changes."""
        changes = []
        for event_id, version, target, zone, local in events:
            key = (zone, local)
            if key not in self.resolved:
                self.resolved[key] = self._resolve(zone, local)
            move = self.resolved[key]
            # Only an instant its local time describes was computed from it:
            # one set otherwise (a hand-made fix in SQL) is left as it is.
            if move is not None and move[0] == target:
                changes.append((event_id, version, move[1], move[2]))
        return changes

    def _resolve(self, zone: str, local: str) -> tuple[datetime, datetime, str] | None:
        try:
            return _resolve(zone, local)
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
        "Recomputing PENDING events with time zone data %s (they follow %s)", version, state.version or "unknown data"
    )
    state.pass_version, state.pass_after_target, state.pass_after_id = version, now, uuid.UUID(int=0)
    state.moved, state.pass_started_at, state.pass_completed_at = {}, now, None


def _pass_batch(*, state: EventZoneData, resolver: _Resolver, batch_size: int) -> Counter:
    """Move the next batch of the pass; record where it stands, or that it is complete."""
    events = _batch(after_target=state.pass_after_target, after_id=state.pass_after_id, batch_size=batch_size)
    moved = _move(rows=resolver.changes(events), now=timezone.now())
    state.moved = dict(Counter(state.moved) + moved)
    if len(events) < batch_size:
        state.version, state.pass_version = state.pass_version, ""
        state.pass_after_target = state.pass_after_id = None
        state.pass_completed_at = timezone.now()
    else:
        state.pass_after_target, state.pass_after_id = events[-1][2], events[-1][0]
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
    resolver = _Resolver(version)
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
            result.moved.update(_pass_batch(state=state, resolver=resolver, batch_size=batch_size))
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
