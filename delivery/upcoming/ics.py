"""A destination's calendar feed as an iCalendar file: the coming celebrations it may announce.

Who may fetch it is delivery.upcoming.feeds (the token). Apart from it so that only the API's
feed view imports icalendar, not every process that loads the console or the worker.

Who is in it, computed at each fetch (no cache: someone who leaves the audience, is erased or
changes their choice is gone at the next one): the occurrences of the next FEED_DAYS that the
destination could announce, by the same rules as its messages and digests
(delivery.upcoming.selectors._fate): of its types, in its audience, public (a calendar is read
by whoever subscribed to it, as a channel is, so a person celebrated privately is not in it even
for a personal destination), and not held back by a pause. A paused person is left out while
the pause lasts: a calendar entry for a greeting that will not be sent would announce what the
pause is there to keep quiet. A disabled destination's feed is empty: it announces nothing.

Each entry is an all-day event on the occurrence's date with the digest's line as its summary,
which never says the age nor the birth year (the handlers' digest_line), and a UID derived from
(recipient id, type, date, destination), hashed so it names no one: a calendar updates the
entry on the next fetch rather than adding another.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

import icalendar

from delivery.models import Destination
from delivery.upcoming.selectors import feed_occurrences

FEED_DAYS = 366
# A feed lists at most this many entries, soonest first: a calendar of a whole company of
# thousands is read by no one, and a fetch stays one short read.
FEED_MAX_EVENTS = 1000
_UID_DOMAIN = "calendar-feed.invalid"


def occurrence_uid(
    *, recipient_id: object, event_type: str, occurrence_date: object, destination_id: int
) -> str:
    """The entry's UID: the same for one occurrence in one destination's feed on every fetch, naming no one."""
    key = f"{recipient_id}:{event_type}:{occurrence_date}:{destination_id}"
    return f"{hashlib.sha256(key.encode()).hexdigest()[:32]}@{_UID_DOMAIN}"


def calendar_feed_ics(*, destination: Destination, now: datetime) -> bytes:
    """The destination's feed as an iCalendar file (RFC 5545)."""
    calendar = icalendar.Calendar()
    calendar.add("prodid", "-//birthday-scheduler//calendar feed//EN")
    calendar.add("version", "2.0")
    calendar.add("calscale", "GREGORIAN")
    calendar.add("x-wr-calname", f"Celebrations: {destination.name}")
    occurrences = (
        feed_occurrences(destination=destination, now=now, days=FEED_DAYS, limit=FEED_MAX_EVENTS)
        if destination.enabled
        else []
    )
    for occurrence in occurrences:
        entry = icalendar.Event()
        entry.add(
            "uid",
            occurrence_uid(
                recipient_id=occurrence.recipient_id,
                event_type=occurrence.event_type,
                occurrence_date=occurrence.occurrence_date,
                destination_id=destination.pk,
            ),
        )
        entry.add("dtstamp", now)
        # All day: a date, not a time (VALUE=DATE), ending the next day as RFC 5545 has it.
        entry.add("dtstart", occurrence.occurrence_date)
        entry.add("dtend", occurrence.occurrence_date + timedelta(days=1))
        entry.add("summary", occurrence.line)
        entry.add("transp", "TRANSPARENT")
        calendar.add_component(entry)
    ical: bytes = calendar.to_ical()
    return ical
