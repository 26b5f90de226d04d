"""`make run`'s first message: on an empty database, one recipient whose birthday greeting goes out now.

A newcomer sees the whole path at work (API model, scheduler claim, worker,
signed POST, the sink) within seconds of starting, instead of waiting for a
09:00 somewhere. Run once the scheduler and worker are up; on a database that
already has recipients it does nothing.
"""

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

import django  # noqa: E402

django.setup()

from datetime import date  # noqa: E402

from scheduling.models import EventStatus  # noqa: E402
from scheduling.services.sync import event_deliver_now  # noqa: E402
from users.models import User  # noqa: E402
from users.services import user_create  # noqa: E402


def main() -> int:
    if User.objects.exists():
        return 0
    ada = user_create(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 12, 10), timezone="Europe/London"
    )
    birthday = ada.events.get(status=EventStatus.PENDING)
    event_deliver_now(event=birthday, operator="make run (first message)")
    print(
        "A first recipient, Ada Lovelace, was created and her birthday greeting sent now: watch the sink.",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
