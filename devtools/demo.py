"""`make run`'s first message: on an empty database, one recipient whose birthday is today, greeted at once.

A newcomer sees the whole path at work (API model, scheduler claim, worker,
signed POST, the sink) within seconds of starting, instead of waiting for a
09:00 somewhere. Nothing is forced: Ada Lovelace is created with today as her
birthday (in her zone) and her own send time a moment ago, so the catch-up on
the day she arrives (EVENT_CATCH_UP_WINDOW) makes today's greeting due at
once, as it would for any recipient added after their send time on their
birthday. No later occurrence is touched: her next greeting is next year's, on
the day. Run once the scheduler and worker are up; on a database that already
has recipients it does nothing.

Where the sink also listens for SMTP (LOCAL_SMTP_HOST and LOCAL_SMTP_PORT in the
environment), a personal email destination mails Ada's address there too.
"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from datetime import datetime  # noqa: E402

from django.utils import timezone  # noqa: E402

from delivery.destinations.fields import DestinationSettings  # noqa: E402
from delivery.destinations.services import destination_create, destinations_seed_default  # noqa: E402
from scheduling.models import EventStatus, EventType  # noqa: E402
from scheduling.times import load_timezone  # noqa: E402
from users.models import User  # noqa: E402
from users.services import user_create  # noqa: E402

ZONE = "Europe/London"
# example.com is reserved for examples (RFC 2606): a mail to it that leaves the sink reaches no one.
EMAIL = "ada.lovelace@example.com"


def _sink_relay() -> str | None:
    """The sink's SMTP relay as an email destination's URL, made with the webhook's default beside it; None
    where the sink takes no mail."""
    host, port = os.environ.get("LOCAL_SMTP_HOST"), os.environ.get("LOCAL_SMTP_PORT")
    if not host or not port:
        return None
    destinations_seed_default()  # WEBHOOK_URL's destination is seeded only while there is none
    relay = f"smtp+plain://{host}:{port}/"
    destination_create(
        settings=DestinationSettings(
            name="Email (local sink)",
            url=relay,
            format="email",
            personal=True,
            email_from="greetings@example.com",
            email_from_name="Birthday Scheduler",
        ),
        operator="demo",
    )
    return relay


def main() -> int:
    if User.objects.exists():
        return 0
    local_now = timezone.now().astimezone(load_timezone(ZONE))
    relay = _sink_relay()
    ada = user_create(
        first_name="Ada",
        last_name="Lovelace",
        email=EMAIL,
        # 1992, a leap year: today may be Feb 29.
        date_of_birth=local_now.date().replace(year=1992),
        timezone=ZONE,
        send_time=local_now.time().replace(second=0, microsecond=0),
    )
    birthday = ada.events.get(status=EventStatus.PENDING, event_type=EventType.BIRTHDAY)
    if birthday.occurrence_date == local_now.date():
        print(
            "A first recipient, Ada Lovelace, whose birthday is today, was created after her send time: "
            "today's greeting is due at once. Watch the sink"
            + (f" (and her mail at {relay})." if relay else "."),
            flush=True,
        )
    else:
        # EVENT_CATCH_UP_WINDOW is 0: a recipient created after the day's send time waits a year.
        print(
            f"A first recipient, Ada Lovelace, was created; her next greeting is due "
            f"{datetime.fromisoformat(birthday.target_timestamp_local):%Y-%m-%d %H:%M} ({ZONE}), since "
            "EVENT_CATCH_UP_WINDOW is 0.",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
