"""The next digest shown is the next one that will be sent: never a date already built, in the destination's zone."""

from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.urls import reverse
from freezegun import freeze_time

from delivery.destinations.services import destination_update
from delivery.dispatch.digests import digests_build_due
from delivery.dispatch.tests.test_digests import _born_on, _digest_destination
from delivery.models import Digest

pytestmark = pytest.mark.django_db

BERLIN = ZoneInfo("Europe/Berlin")
DAY = date(2026, 12, 9)  # a Wednesday


def _at(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=BERLIN)


def _sent_at_nine_then_moved_to_half_past():
    """The day's digest built at 09:00 Berlin, then at 09:10 its time set back to 09:30."""
    _born_on(DAY, first="Ada")
    destination = _digest_destination(day=DAY)
    assert digests_build_due(now=_at(DAY, 9)).queued == 1
    with freeze_time(_at(DAY, 9, 10)):
        return destination_update(destination=destination, operator="ops", changes={"digest_time": "09:30"})


def test_moving_the_time_later_after_the_days_digest_was_sent_names_the_next_day():
    destination = _sent_at_nine_then_moved_to_half_past()

    assert Digest.objects.get().local_date == DAY
    assert (destination.next_digest_date, destination.next_digest_at) == (
        DAY + timedelta(days=1),
        _at(DAY + timedelta(days=1), 9, 30),
    )
    # and the scheduler at 09:30 builds nothing that day: what was shown is what happens
    assert digests_build_due(now=_at(DAY, 9, 30)).handled == 0


def test_moving_the_time_later_on_a_day_not_yet_built_names_that_day():
    _born_on(DAY, first="Ada")
    destination = _digest_destination(day=DAY)

    with freeze_time(_at(DAY, 8, 50)):
        moved = destination_update(destination=destination, operator="ops", changes={"digest_time": "09:30"})

    assert (moved.next_digest_date, moved.next_digest_at) == (DAY, _at(DAY, 9, 30))


def test_the_api_answers_the_next_digest_to_be_sent_in_the_destinations_zone_and_in_utc(api_client):
    destination = _sent_at_nine_then_moved_to_half_past()

    body = api_client.get(f"/api/v1/destinations/{destination.pk}/").json()

    assert body["next_digest_date"] == "2026-12-10"
    assert body["next_digest_at"] == "2026-12-10T08:30:00Z"
    assert body["next_digest_local"] == "2026-12-10T09:30:00+01:00"


def test_the_console_shows_the_next_digest_to_be_sent_at_its_berlin_time_with_utc_on_hover(console):
    destination = _sent_at_nine_then_moved_to_half_past()

    page = console.get(reverse("admin:delivery_destination_change", args=[destination.pk])).content.decode()
    listed = console.get(reverse("admin:delivery_destination_changelist")).content.decode()

    shown = (
        '<time class="bs-zoned" datetime="2026-12-10T09:30:00+01:00" title="2026-12-10 08:30 UTC">'
        "Thu 2026-12-10 09:30 Europe/Berlin</time>"
    )
    assert shown in page and shown in listed
    assert "2026-12-09 09:30" not in page
