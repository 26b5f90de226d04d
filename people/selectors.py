"""What the person's own page shows: where and when they will be greeted, by the rules the claim and the
digests follow (delivery.destinations.audience's router, scheduling.celebration's visibility)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from delivery.destinations.audience import DestinationRouter
from delivery.models import Destination, Weekend
from delivery.rules.digest_calendar import SATURDAY, sends_on
from scheduling.celebration import Visibility, visibility_of
from scheduling.models import Event, EventStatus
from scheduling.selectors import celebration_defaults
from scheduling.times import wall_time_instant
from users.models import CelebrationChoice, User


@dataclass(frozen=True)
class Announcer:
    """One destination that greets the person for one occurrence."""

    destination: Destination
    # When it goes: the occurrence's own send time, or the digest's that names it.
    at: datetime
    # The person left this (shared) destination: it will not name them.
    opted_out: bool

    @property
    def digest(self) -> bool:
        return self.destination.takes_digest


@dataclass(frozen=True)
class Greeting:
    """One pending occurrence of theirs and who greets them for it."""

    event_type: str
    occurrence_date: date
    at: datetime
    visibility: str
    announcers: list[Announcer]


@dataclass(frozen=True)
class PersonView:
    """Everything the page shows about the person besides their own row."""

    # Their own visibility per event type (a type absent: the company default), and the defaults.
    choices: dict[str, str]
    defaults: dict[str, str]
    greetings: list[Greeting]
    # The shared (not personal) destinations that would announce them for some occurrence,
    # opted out of or not, in name order: what they may leave or rejoin.
    shared: list[Destination] = field(default_factory=list)


def _digest_instant(*, destination: Destination, day: date) -> datetime:
    """When the digest naming an occurrence of `day` goes (delivery.rules.digest_calendar's weekend rule)."""
    assert destination.digest_time is not None  # a digest destination
    if not sends_on(day=day, weekend=destination.weekend):
        # A weekend day: Friday's digest names it, or Monday's.
        if destination.weekend == Weekend.FRIDAY_BEFORE:
            day -= timedelta(days=day.weekday() - 4)
        else:
            day += timedelta(days=7 - day.weekday() if day.weekday() >= SATURDAY else 0)
    instant, _ = wall_time_instant(
        wall=datetime.combine(day, destination.digest_time), timezone_name=destination.digest_timezone
    )
    return instant


def person_view(*, user: User, opted_out: set[int]) -> PersonView:
    """Where and when `user` will be greeted for each pending occurrence, by the rules in force now.

    A few small queries, none growing with history: their PENDING events (the partial unique index
    of one PENDING event per user and type), their choices, the company defaults, the enabled
    destinations. `opted_out`: the destination ids they left.
    """
    choices = dict(CelebrationChoice.objects.filter(user_id=user.pk).values_list("event_type", "visibility"))
    defaults = celebration_defaults()
    router = DestinationRouter(list(Destination.objects.filter(enabled=True).order_by("id")))
    greetings: list[Greeting] = []
    shared: dict[int, Destination] = {}
    events = Event.objects.filter(user_id=user.pk, status=EventStatus.PENDING).order_by(
        "target_timestamp_utc"
    )
    for event in events:
        visibility = visibility_of(choices.get(event.event_type), default=defaults.get(event.event_type))
        announcers: list[Announcer] = []
        if visibility != Visibility.NONE and not user.paused:
            private = visibility == Visibility.PRIVATE
            for destination in router.targets(
                event_type=event.event_type, labels=user.labels, private=private
            ):
                announcers.append(
                    Announcer(destination, event.target_timestamp_utc, destination.id in opted_out)
                )
            if not private:
                # A digest names many people: never for a private one (scheduling.celebration).
                for destination in router.digests_naming(event_type=event.event_type, labels=user.labels):
                    at = _digest_instant(destination=destination, day=event.occurrence_date)
                    announcers.append(Announcer(destination, at, destination.id in opted_out))
        for announcer in announcers:
            if not announcer.destination.personal:
                shared[announcer.destination.id] = announcer.destination
        greetings.append(
            Greeting(
                event.event_type,
                event.occurrence_date,
                event.target_timestamp_utc,
                visibility,
                sorted(announcers, key=lambda a: (a.at, a.destination.name)),
            )
        )
    return PersonView(
        choices=choices,
        defaults=defaults,
        greetings=greetings,
        shared=sorted(shared.values(), key=lambda d: d.name),
    )
