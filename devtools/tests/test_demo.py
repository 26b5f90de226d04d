"""`make run`'s first greeting (devtools/demo.py): today's, due at once, and no other occurrence used up."""

from __future__ import annotations

import pytest
from django.utils import timezone

from devtools import demo
from scheduling.models import Event, EventStatus, EventType
from scheduling.times import load_timezone
from users.models import User
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_demo_greets_a_recipient_whose_birthday_is_today_with_todays_occurrence():
    # given an empty database
    # when make run's demo runs
    assert demo.main() == 0

    # then Ada's birthday of today (in her zone) is due at once: her real birthday, not next year's
    ada = User.objects.get(first_name="Ada", last_name="Lovelace")
    birthday = Event.objects.get(user=ada, event_type=EventType.BIRTHDAY, status=EventStatus.PENDING)
    now = timezone.now()
    assert birthday.occurrence_date == now.astimezone(load_timezone(demo.ZONE)).date()
    assert birthday.target_timestamp_utc <= now


def test_the_demo_does_nothing_on_a_database_with_recipients():
    # given a recipient already
    user = UserFactory()
    before = list(Event.objects.values())

    # when the demo runs, then nothing is created or moved
    assert demo.main() == 0
    assert list(User.objects.values_list("pk", flat=True)) == [user.pk]
    assert list(Event.objects.values()) == before
