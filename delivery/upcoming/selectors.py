"""What is coming: each occurrence of the next days, where it will be sent, when, in which words, or why not.

Reads only: the rules are their owners' (docs/design.md, "Upcoming and the calendar feed"):
the claim's holding back (delivery.dispatch.claim.held_back_reason: pauses, not celebrated),
whom a destination greets (delivery.destinations.audience.DestinationRouter), the person's
visibility (scheduling.celebration.visibility_of), the digest calendar
(delivery.rules.digest_calendar) and the choice of a message's template
(scheduling.selectors.message_choice). `_fate` is the one place that says, for one occurrence,
where it goes and why it is left out of the rest: a new reason is one member of LeftOutReason
and one branch there.

Occurrences are the PENDING events (one per recipient and type) whose send time is in the
window, read in that order through the claim's partial index (event_pending_due_idx), a page
at a time (keyset on target time and id), so a read costs one page however many events
and recipients there are (bench/workloads/upcoming.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import NamedTuple

from django.db import models
from django.db.models import Q, QuerySet

from delivery.destinations.audience import Audience, DestinationRouter
from delivery.dispatch.claim import held_back_reason
from delivery.dispatch.payload import message_overrides
from delivery.models import Destination, DestinationOptOut
from delivery.rules.digest_calendar import dates_named, digest_date_naming, digest_dates
from scheduling.celebration import NOT_CELEBRATED, Visibility, visibility_of
from scheduling.handlers import RecipientRow, get_handler
from scheduling.models import Event, EventStatus
from scheduling.pauses import EVENT_TYPE_PAUSED, RECIPIENT_PAUSED, PauseSpan
from scheduling.selectors import (
    MessageTemplates,
    celebration_defaults,
    event_type_pauses,
    message_choice,
    message_templates,
)
from scheduling.times import load_timezone, wall_time_instant
from users.models import CelebrationChoice

UPCOMING_DAYS_DEFAULT = 14
UPCOMING_DAYS_MAX = 366
# Occurrences per page: what a person reads on one screen, and a read that stays short.
PAGE_SIZE = 100
PAGE_SIZE_MAX = 500
# Names shown per coming digest on a destination's page.
DIGEST_NAMES_SHOWN = 50


class LeftOutReason(models.TextChoices):
    """Why an occurrence is not sent somewhere (or anywhere)."""

    RECIPIENT_PAUSED = "recipient_paused", "Their greetings are paused"
    TYPE_PAUSED = "type_paused", "This event type is paused"
    NOT_CELEBRATED = "not_celebrated", "Not celebrated: their choice"
    PRIVATE = "private", "Celebrated privately: only destinations that reach the person alone"
    NOT_IN_AUDIENCE = "not_in_audience", "Not in the audience"
    NO_DESTINATION = "no_destination", "No enabled destination subscribes to this type"
    DISABLED = "disabled", "The destination is disabled"
    DIGEST_BUILT = "digest_built", "The digest of that date was built already"
    OPTED_OUT = "opted_out", "They opted out of this destination"
    NO_EMAIL = "no_email", "No email address it may use (none, or marked undeliverable)"


# The claim's failure reasons (held_back_reason) as reasons here.
_HELD_BACK = {
    RECIPIENT_PAUSED: LeftOutReason.RECIPIENT_PAUSED,
    EVENT_TYPE_PAUSED: LeftOutReason.TYPE_PAUSED,
    NOT_CELEBRATED: LeftOutReason.NOT_CELEBRATED,
}


class UpcomingFilterError(ValueError):
    """A filter that names nothing (the API answers 400 with `field`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Placement:
    """Where and when an occurrence will be sent, and in which words."""

    destination_id: int
    destination_name: str
    # In the destination's digest of `digest_date`, else a message of its own.
    digest: bool
    digest_date: date | None
    at: datetime
    # The zone of the local time shown: the destination's for a digest, the recipient's otherwise.
    timezone: str
    text: str
    # The template's language ("": the type's default); the destination's own text when overridden.
    language: str
    overridden: bool
    # The recipient has a language and no template is in it: the default is used.
    default_language: bool

    @property
    def at_local(self) -> datetime:
        return self.at.astimezone(load_timezone(self.timezone))


@dataclass(frozen=True)
class LeftOut:
    """Where an occurrence will not be sent, and why; no destination: nowhere."""

    destination_id: int | None
    destination_name: str
    reason: LeftOutReason

    @property
    def label(self) -> str:
        return str(self.reason.label)


@dataclass(frozen=True)
class UpcomingOccurrence:
    event_id: uuid.UUID
    event_type: str
    occurrence_date: date
    # The years it counts (an age, an anniversary's years) if the person lets it be said; None otherwise.
    years: int | None
    # The recipient's own send time.
    target_at: datetime
    timezone: str
    recipient_id: uuid.UUID
    first_name: str
    last_name: str
    labels: tuple[str, ...]
    language: str
    # The visibility in force (scheduling.celebration).
    visibility: str
    # The occurrence as a digest names it: never the age nor the birth year.
    line: str
    placements: tuple[Placement, ...]
    left_out: tuple[LeftOut, ...]

    @property
    def announced(self) -> bool:
        """Whether it may be announced where it is placed: public, and left out for no reason but a built digest."""
        return self.visibility == Visibility.PUBLIC and all(
            r.reason == LeftOutReason.DIGEST_BUILT for r in self.left_out
        )

    @property
    def name(self) -> str:
        return f"{self.first_name} {self.last_name}"

    @property
    def target_local(self) -> datetime:
        return self.target_at.astimezone(load_timezone(self.timezone))


@dataclass(frozen=True)
class UpcomingPage:
    occurrences: list[UpcomingOccurrence]
    until: datetime
    # Pass as `cursor` for the next page; None: this is the last.
    next_cursor: str | None


@dataclass(frozen=True)
class UpcomingDigest:
    """A coming digest of a destination and the names it will carry (as things stand now)."""

    local_date: date
    at: datetime
    timezone: str
    occurrences: list[UpcomingOccurrence]
    # More than DIGEST_NAMES_SHOWN: only the first are listed.
    more: bool

    @property
    def at_local(self) -> datetime:
        return self.at.astimezone(load_timezone(self.timezone))


class _Row(NamedTuple):
    """An event and its recipient, as read (_rows): what the handlers read, their pause, labels and
    language, as the claim reads them (delivery.dispatch.claim.ClaimedEvent), and their email. Tuples,
    not model instances: a page of 500 costs a fraction of what as many instances would."""

    id: uuid.UUID
    event_type: str
    occurrence_date: date
    target_timestamp_utc: datetime
    target_timezone: str
    recipient: RecipientRow
    pause: PauseSpan
    labels: list[str]
    language: str
    email: str
    email_undeliverable_at: datetime | None

    @property
    def mailable(self) -> bool:
        """Whether a personal email destination may mail them (delivery.dispatch.claim's rule)."""
        return bool(self.email) and self.email_undeliverable_at is None


# The columns read, flat: the event's, then the recipient's (RecipientRow's and PauseSpan's, nested in _Row
# by _rows, then the rest of _Row's).
_RECIPIENT = _Row._fields.index("recipient")
_PAUSE = _RECIPIENT + len(RecipientRow._fields)
_REST = _PAUSE + len(PauseSpan._fields)
_ROW_COLUMNS = [
    *_Row._fields[:_RECIPIENT],
    *(
        f"user__{name}"
        for name in (
            *RecipientRow._fields,
            *PauseSpan._fields,
            *_Row._fields[_Row._fields.index("pause") + 1 :],
        )
    ),
]


def _rows(events: QuerySet[Event]) -> list[_Row]:
    return [
        _Row._make(
            (
                *row[:_RECIPIENT],
                RecipientRow._make(row[_RECIPIENT:_PAUSE]),
                PauseSpan._make(row[_PAUSE:_REST]),
                *row[_REST:],
            )
        )
        for row in events.values_list(*_ROW_COLUMNS)
    ]


@dataclass
class _Rules:
    """Everything an occurrence's fate is decided from, read once per call."""

    router: DestinationRouter
    every_destination: dict[int, Destination]
    type_pauses: dict[str, PauseSpan]
    defaults: dict[str, str]
    templates: MessageTemplates
    overrides: dict[tuple[int, str], str]
    choices: dict[tuple[uuid.UUID, str], str] = field(default_factory=dict)
    # The destinations each person opted out of (delivery.models.DestinationOptOut).
    opted_out: dict[uuid.UUID, set[int]] = field(default_factory=dict)

    @classmethod
    def read(cls) -> _Rules:
        destinations = list(Destination.objects.order_by("id"))
        router = DestinationRouter([d for d in destinations if d.enabled])
        return cls(
            router=router,
            every_destination={d.pk: d for d in destinations},
            type_pauses=event_type_pauses(),
            defaults=celebration_defaults(),
            templates=message_templates(),
            overrides=message_overrides(destinations=router.destinations),
        )

    def read_choices(self, events: Sequence[_Row]) -> None:
        """The people's own visibility of these events' types, and their opt-outs, in two queries."""
        people = {e.recipient.id for e in events}
        self.choices = {
            (user_id, event_type): visibility
            for user_id, event_type, visibility in CelebrationChoice.objects.filter(
                user_id__in=people
            ).values_list("user_id", "event_type", "visibility")
        }
        self.opted_out = {}
        for user_id, destination_id in DestinationOptOut.objects.filter(user_id__in=people).values_list(
            "user_id", "destination_id"
        ):
            self.opted_out.setdefault(user_id, set()).add(destination_id)


# A cursor is the last occurrence's send time, in microseconds since the epoch, and its id: nothing in
# it a URL must escape.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def cursor_of(event: UpcomingOccurrence) -> str:
    return f"{(event.target_at - _EPOCH) // _MICROSECOND}_{event.event_id}"


def cursor_parse(cursor: str) -> tuple[datetime, uuid.UUID]:
    """The (target, id) after which a page starts; ValueError if it is not a cursor."""
    at, _, event_id = cursor.partition("_")
    if not at.isdigit() or len(at) > 17:
        raise ValueError("a cursor starts with a count of microseconds")
    return _EPOCH + int(at) * _MICROSECOND, uuid.UUID(event_id)


def upcoming_list(
    *,
    now: datetime,
    days: int = UPCOMING_DAYS_DEFAULT,
    destination_id: int | None = None,
    label: str | None = None,
    event_type: str | None = None,
    user_id: uuid.UUID | None = None,
    cursor: str | None = None,
    limit: int = PAGE_SIZE,
) -> UpcomingPage:
    """The occurrences whose send time is in the next `days` days, soonest first, a page of `limit`.

    `destination_id`: only those it may name (its types, its audience), and only what concerns it;
    `label`: recipients holding it; `event_type`; `user_id`: one recipient's.
    Raises UpcomingFilterError for a destination that does not exist or a bad cursor.
    """
    rules = _Rules.read()
    only = None
    if destination_id is not None:
        only = rules.every_destination.get(destination_id)
        if only is None:
            raise UpcomingFilterError("destination", "No destination has this id.")
    until = now + timedelta(days=days)
    events = _pending(since=now, until=until, only=only, label=label, event_type=event_type, user_id=user_id)
    rows: list[_Row] = []
    if cursor:
        try:
            after_at, after_id = cursor_parse(cursor)
        except ValueError as exc:
            raise UpcomingFilterError("cursor", "Not a cursor this list gave.") from exc
        # Two simple ranges rather than one "(target, id) after the cursor": many events share an
        # instant (09:00 in one zone on one date), and the index holds the target alone, so the
        # rest of the cursor's instant is read by equality, then what follows as the first page is.
        rows = _rows(
            events.filter(target_timestamp_utc=after_at, id__gt=after_id).order_by("id")[: limit + 1]
        )
        events = events.filter(target_timestamp_utc__gt=after_at)
    if len(rows) <= limit:
        rows += _rows(events.order_by("target_timestamp_utc", "id")[: limit + 1 - len(rows)])
    occurrences = _occurrences(rows=rows[:limit], rules=rules, only=only)
    more = len(rows) > limit
    return UpcomingPage(
        occurrences=occurrences,
        until=until,
        next_cursor=cursor_of(occurrences[-1]) if more and occurrences else None,
    )


def recipient_upcoming(*, user_id: uuid.UUID, now: datetime) -> list[UpcomingOccurrence]:
    """Where and when one recipient will next be greeted, per event type (their PENDING events)."""
    return upcoming_list(now=now, days=UPCOMING_DAYS_MAX, user_id=user_id, limit=PAGE_SIZE).occurrences


def destination_upcoming_digests(
    *, destination: Destination, now: datetime, count: int = 3
) -> list[UpcomingDigest]:
    """The destination's next `count` digests, each with the occurrences it will name as things stand now.

    A digest names the occurrences of its dates whatever their state (one claimed earlier
    that day is still named: delivery.dispatch.digests), so both the PENDING events and the
    claimed ones are read, each through its own partial index by target time.
    """
    rules = _Rules.read()
    coming = []
    for day, at in digest_dates(destination=destination, count=count):
        first, last = dates_named(
            day=day,
            weekend=destination.weekend,
            days_ahead=destination.digest_days_ahead,
            weekday=destination.digest_weekday,
        )
        # An occurrence's send time is its local date's, at most a day either side of UTC's.
        since = datetime.combine(first - timedelta(days=1), time(), tzinfo=UTC)
        until = datetime.combine(last + timedelta(days=2), time(), tzinfo=UTC)
        rows: list[_Row] = []
        # Claimed already: only what was due before now.
        for pending, before in ((True, until), (False, min(until, now))):
            if since >= before:
                continue
            events = _events(since=since, until=before, only=destination, pending=pending).filter(
                occurrence_date__gte=first, occurrence_date__lte=last
            )
            rows += _rows(events.order_by("target_timestamp_utc", "id")[: DIGEST_NAMES_SHOWN + 1])
        named = [
            occurrence
            for occurrence in _occurrences(rows=rows, rules=rules, only=destination)
            if any(p.digest and p.digest_date == day for p in occurrence.placements)
        ]
        named.sort(key=lambda o: (o.occurrence_date, o.last_name, o.first_name, str(o.recipient_id)))
        coming.append(
            UpcomingDigest(
                local_date=day,
                at=at,
                timezone=destination.digest_timezone,
                occurrences=named[:DIGEST_NAMES_SHOWN],
                more=len(named) > DIGEST_NAMES_SHOWN,
            )
        )
    return coming


def feed_occurrences(
    *, destination: Destination, now: datetime, days: int, limit: int
) -> list[UpcomingOccurrence]:
    """The occurrences of the next `days` the destination may announce (a calendar feed's), soonest first."""
    rules = _Rules.read()
    events = _events(since=now, until=now + timedelta(days=days), only=destination, pending=True)
    rows = _rows(events.order_by("target_timestamp_utc", "id")[:limit])
    return [o for o in _occurrences(rows=rows, rules=rules, only=destination) if o.announced]


def _events(*, since: datetime, until: datetime, only: Destination | None, pending: bool) -> QuerySet[Event]:
    # Each through its partial index: event_pending_due_idx, or event_history_idx by status then time.
    status = (
        Q(status=EventStatus.PENDING)
        if pending
        else Q(status__in=[s for s in EventStatus.values if s != EventStatus.PENDING])
    )
    events = Event.objects.filter(status, target_timestamp_utc__gte=since, target_timestamp_utc__lt=until)
    if only is not None:
        events = events.filter(Audience.of(only).recipient_filter(prefix="user__"))
        if only.event_types:
            events = events.filter(event_type__in=only.event_types)
    return events


def _pending(
    *,
    since: datetime,
    until: datetime,
    only: Destination | None,
    label: str | None,
    event_type: str | None,
    user_id: uuid.UUID | None,
) -> QuerySet[Event]:
    events = _events(since=since, until=until, only=only, pending=True)
    if label:
        events = events.filter(user__labels__contains=[label])
    if event_type:
        events = events.filter(event_type=event_type)
    if user_id is not None:
        events = events.filter(user_id=user_id)
    return events


def _occurrences(
    *, rows: Iterable[_Row], rules: _Rules, only: Destination | None
) -> list[UpcomingOccurrence]:
    rows = list(rows)
    rules.read_choices(rows)
    return [_occurrence(event=event, rules=rules, only=only) for event in rows]


def _occurrence(*, event: _Row, rules: _Rules, only: Destination | None) -> UpcomingOccurrence:
    recipient = event.recipient
    visibility = visibility_of(
        rules.choices.get((recipient.id, event.event_type)), default=rules.defaults.get(event.event_type)
    )
    placements, left_out = _fate(event=event, visibility=visibility, rules=rules, only=only)
    years = message_choice(templates=rules.templates, occasion=event, user=recipient).years
    return UpcomingOccurrence(
        event_id=event.id,
        event_type=event.event_type,
        occurrence_date=event.occurrence_date,
        years=years,
        target_at=event.target_timestamp_utc,
        timezone=event.target_timezone,
        recipient_id=recipient.id,
        first_name=recipient.first_name,
        last_name=recipient.last_name,
        labels=tuple(event.labels),
        language=event.language,
        visibility=visibility,
        line=get_handler(event.event_type).digest_line(user=recipient, occurrence_date=event.occurrence_date),
        placements=tuple(placements),
        left_out=tuple(left_out),
    )


def _fate(
    *, event: _Row, visibility: str, rules: _Rules, only: Destination | None
) -> tuple[list[Placement], list[LeftOut]]:
    """Where the occurrence goes and why it is left out elsewhere: the one place reasons are decided.

    `only`: what concerns that destination alone. Without it, a destination whose audience
    does not hold the person is not listed one by one (a company with fifty team channels would
    read fifty lines a person): only "not in the audience" when no destination takes them.
    """
    event_type = event.event_type
    held = held_back_reason(
        pause=event.pause,
        type_pause=rules.type_pauses.get(event_type),
        target=event.target_timestamp_utc,
        visibility=visibility,
    )
    if held is not None:
        return [], [LeftOut(None, "", _HELD_BACK[held])]
    if only is not None and not only.enabled:
        return [], [LeftOut(only.pk, only.name, LeftOutReason.DISABLED)]
    private = visibility == Visibility.PRIVATE
    placements: list[Placement] = []
    left_out: list[LeftOut] = []
    opted_out = rules.opted_out.get(event.recipient.id, set())
    for destination in rules.router.targets(event_type=event_type, labels=event.labels, private=private):
        if destination.pk in opted_out:
            left_out.append(LeftOut(destination.pk, destination.name, LeftOutReason.OPTED_OUT))
        elif destination.mails_the_person and not event.mailable:
            left_out.append(LeftOut(destination.pk, destination.name, LeftOutReason.NO_EMAIL))
        # Rendered only where it is to be shown.
        elif only is None or destination.pk == only.pk:
            placements.append(_message_placement(event=event, destination=destination, rules=rules))
    # Subscribed and holding them in its audience, but not personal: a private person is not named there.
    if private:
        for destination in rules.router.destinations:
            if (
                not destination.personal
                and destination.subscribes_to(event_type)
                and Audience.of(destination).includes(event.labels)
            ):
                left_out.append(LeftOut(destination.pk, destination.name, LeftOutReason.PRIVATE))
    for destination in rules.router.digests_naming(event_type=event_type, labels=event.labels):
        if only is not None and destination.pk != only.pk:
            continue
        if private:
            left_out.append(LeftOut(destination.pk, destination.name, LeftOutReason.PRIVATE))
            continue
        if destination.pk in opted_out:
            left_out.append(LeftOut(destination.pk, destination.name, LeftOutReason.OPTED_OUT))
            continue
        placement = _digest_placement(event=event, destination=destination)
        if placement is None:
            left_out.append(LeftOut(destination.pk, destination.name, LeftOutReason.DIGEST_BUILT))
        else:
            placements.append(placement)
    if only is not None:
        placements = [p for p in placements if p.destination_id == only.pk]
        left_out = [r for r in left_out if r.destination_id == only.pk]
        if not placements and not left_out:
            left_out = [LeftOut(only.pk, only.name, LeftOutReason.NOT_IN_AUDIENCE)]
    elif not placements and not left_out:
        subscribed = rules.router.subscribed(event_type) or any(
            d.subscribes_to(event_type) for d in rules.router.digests
        )
        reason = LeftOutReason.NOT_IN_AUDIENCE if subscribed else LeftOutReason.NO_DESTINATION
        left_out = [LeftOut(None, "", reason)]
    return placements, left_out


def _message_placement(*, event: _Row, destination: Destination, rules: _Rules) -> Placement:
    choice = message_choice(
        templates=rules.templates,
        occasion=event,
        user=event.recipient,
        language=event.language,
        override=rules.overrides.get((destination.pk, event.event_type)),
    )
    return Placement(
        destination_id=destination.pk,
        destination_name=destination.name,
        digest=False,
        digest_date=None,
        at=event.target_timestamp_utc,
        timezone=event.target_timezone,
        text=choice.text,
        language=choice.language,
        overridden=choice.overridden,
        default_language=bool(event.language) and not choice.overridden and not choice.language,
    )


def _digest_placement(*, event: _Row, destination: Destination) -> Placement | None:
    """The digest naming the occurrence; None if that date's digest was built already (never built twice)."""
    assert destination.digest_time is not None and destination.next_digest_date is not None
    day = digest_date_naming(
        occurrence_date=event.occurrence_date,
        weekend=destination.weekend,
        days_ahead=destination.digest_days_ahead,
        weekday=destination.digest_weekday,
    )
    if day < destination.next_digest_date:
        return None
    at, _ = wall_time_instant(
        wall=datetime.combine(day, destination.digest_time), timezone_name=destination.digest_timezone
    )
    return Placement(
        destination_id=destination.pk,
        destination_name=destination.name,
        digest=True,
        digest_date=day,
        at=at,
        timezone=destination.digest_timezone,
        text=get_handler(event.event_type).digest_line(
            user=event.recipient, occurrence_date=event.occurrence_date
        ),
        language="",
        overridden=False,
        default_language=False,
    )
