"""People and destinations for the upcoming tests, their occurrences a few days from now."""

from datetime import date, datetime, time, timedelta

from django.utils import timezone

from delivery.destinations.services import destination_url_fields
from delivery.models import Destination
from delivery.rules.digest_calendar import digest_schedule
from users.tests.factories import UserFactory


def in_days(days: int) -> date:
    return timezone.localdate() + timedelta(days=days)


def born(days: int, *, first: str, last: str = "Lovelace", year: int = 1990, **fields) -> object:
    """A recipient whose birthday comes in `days` days (09:00 in their zone, Berlin by default)."""
    day = in_days(days)
    fields.setdefault("timezone", "Europe/Berlin")
    return UserFactory(
        first_name=first, last_name=last, date_of_birth=date(year, day.month, day.day), **fields
    )


def destination(name: str, **fields) -> Destination:
    """A per-message destination (a digest one with `digest_time` and `digest_timezone`)."""
    made = Destination.objects.create(
        name=name, **destination_url_fields(url=f"https://hooks.example.com/{name}"), **fields
    )
    if made.digest_time is not None:
        digest_schedule(destination=made, now=timezone.now())
        made.save()
    return made


def digest_destination(
    name: str, *, at: time = time(9, 30), zone: str = "Europe/Berlin", **fields
) -> Destination:
    return destination(name, digest_time=at, digest_timezone=zone, next_digest_at=timezone.now(), **fields)


def aware(day: date, at: time, zone) -> datetime:
    return datetime.combine(day, at, tzinfo=zone)
