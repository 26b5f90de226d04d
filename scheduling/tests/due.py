"""Tests' way to make any PENDING event due at once (same occurrence and key), whatever its date.

The console's "deliver now" (scheduling.services.sync.event_deliver_now) sends
only today's occurrence; tests of wake-ups and of processes need an event due
now without waiting for a recipient whose birthday is today.
"""

from __future__ import annotations

from django.utils import timezone

from scheduling.handlers import Occurrence
from scheduling.models import Event
from scheduling.services.sync import event_reschedule
from scheduling.times import load_timezone


def event_make_due_now(*, event: Event) -> Event:
    now = timezone.now()
    return event_reschedule(
        event=event,
        occurrence=Occurrence(
            occurrence_date=event.occurrence_date,
            target_utc=now,
            target_local=now.astimezone(load_timezone(event.target_timezone)),
            timezone_name=event.target_timezone,
        ),
    )
