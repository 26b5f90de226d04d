"""PENDING events follow a newer time zone database (scheduling.services.zone_rules, scheduling.zonedata).

The two databases are real: the machine's, and IANA 2023d (scheduling/tests/conftest.py),
under which Asia/Almaty is still UTC+6 (UTC+5 from 2024a): 09:00 there on a
mid-June birthday is 03:00Z under the old rules, 04:00Z under the new.
"""

import logging
import os
import zoneinfo
from datetime import UTC, date, datetime, time, timedelta
from io import StringIO

import pytest
import tzdata
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from delivery.dispatch.scheduler import Scheduler
from scheduling import zonedata
from scheduling.models import Event, EventStatus, EventType, EventZoneData
from scheduling.services.zone_rules import events_follow_zone_data
from scheduling.tests.conftest import OLD_VERSION
from scheduling.tests.due import event_make_due_now
from scheduling.times import load_timezone
from users.services import user_create, user_update, users_bulk_create_with_events

pytestmark = pytest.mark.django_db


def recipient(zone: str = "Asia/Almaty", born: date = date(1990, 6, 15)):
    return user_create(first_name="Aigerim", last_name="Nurlanova", date_of_birth=born, timezone=zone)


def birthday(user) -> Event:
    return Event.objects.get(
        user=user, event_type=EventType.BIRTHDAY, status__in=[EventStatus.PENDING, EventStatus.PROCESSING]
    )


def at(event: Event, hour: int) -> datetime:
    return datetime.combine(event.occurrence_date, time(hour), tzinfo=UTC)


def test_a_newer_database_moves_the_pending_events_whose_instant_changes_keeping_their_key(use_zone_database):
    # given events computed with 2023d (Almaty UTC+6), which the events are known to follow
    use_zone_database("old")
    almaty, new_york = recipient(), recipient(zone="America/New_York")
    events_follow_zone_data()
    before = birthday(almaty)
    untouched = Event.objects.values().get(pk=birthday(new_york).pk)
    assert before.target_timestamp_utc == at(before, 3)
    assert EventZoneData.objects.get().version == OLD_VERSION

    # when a process with the machine's database (Almaty UTC+5) follows it
    use_zone_database("current")
    result = events_follow_zone_data()

    # then the Almaty event is at 09:00 local by the new rules: 04:00Z, same occurrence and key
    after = birthday(almaty)
    assert after.target_timestamp_utc == at(before, 4)
    assert after.target_timestamp_local == f"{before.occurrence_date.isoformat()}T09:00:00+05:00"
    assert (after.occurrence_date, after.idempotency_key, after.status) == (
        before.occurrence_date,
        before.idempotency_key,
        EventStatus.PENDING,
    )
    assert after.version == before.version + 1
    # and New York's rules did not change: its row was not written
    assert Event.objects.values().get(pk=untouched["id"]) == untouched
    assert result.moved == {"Asia/Almaty": 1}
    state = EventZoneData.objects.get()
    assert (state.version, state.pass_version, state.moved) == (
        zonedata.zone_data_version(),
        "",
        {"Asia/Almaty": 1},
    )


def test_a_processing_event_is_left_as_it_was_claimed(use_zone_database):
    # given an Almaty event computed with 2023d and claimed since
    use_zone_database("old")
    claimed = birthday(recipient())
    Event.objects.filter(pk=claimed.pk).update(status=EventStatus.PROCESSING)
    claimed = Event.objects.values().get(pk=claimed.pk)

    # when the events follow the machine's database
    use_zone_database("current")
    result = events_follow_zone_data()

    # then the claimed event is as it was (03:00Z, same version)
    assert Event.objects.values().get(pk=claimed["id"]) == claimed
    assert result.moved == {}


def test_an_edit_right_after_the_update_agrees_with_the_recomputation(use_zone_database):
    # given an Almaty event computed with 2023d, and the machine's database installed since
    use_zone_database("old")
    computed_before = recipient()
    moving = recipient(zone="America/New_York")
    use_zone_database("current")

    # when a recipient is created and another moves to Almaty before any scheduler looked
    created = recipient(born=date(1985, 6, 15))
    user_update(user=moving, data={"timezone": "Asia/Almaty"})
    result = events_follow_zone_data()

    # then all three go out at 09:00 Almaty time by the new rules, and the pass moved only the old one
    for user in (computed_before, created, moving):
        event = birthday(user)
        assert event.target_timestamp_utc == at(event, 4), user
    assert result.moved == {"Asia/Almaty": 1}


def test_a_pass_cut_short_resumes_where_it_stopped_and_moves_each_event_once(use_zone_database):
    # given seven Almaty events computed with 2023d, on different days
    use_zone_database("old")
    users = [recipient(born=date(1990, 6, day)) for day in range(1, 8)]
    use_zone_database("current")

    # when the pass is given no time: one batch of two per call
    calls = [events_follow_zone_data(batch_size=2, seconds=0)]
    state = EventZoneData.objects.get()
    while not calls[-1].complete:
        calls.append(events_follow_zone_data(batch_size=2, seconds=0))

    # then the first call stopped part-way, recorded where, and each event moved once
    # (an event moved later than where the pass stands is read again, and left)
    assert (state.pass_version, state.version) == (zonedata.zone_data_version(), "")
    assert not calls[0].complete and state.pass_after_id is not None
    assert sum(sum(call.moved.values()) for call in calls) == 7
    assert [birthday(user).version for user in users] == [2] * 7
    assert EventZoneData.objects.get().moved == {"Asia/Almaty": 7}


def test_a_pass_done_again_moves_nothing(use_zone_database):
    # given Almaty events already moved to the machine's database
    use_zone_database("old")
    user = recipient()
    use_zone_database("current")
    events_follow_zone_data()
    moved = Event.objects.values().get(pk=birthday(user).pk)

    # when the record of that pass is lost and the pass runs again
    EventZoneData.objects.all().delete()
    result = events_follow_zone_data()

    # then nothing is written
    assert result.moved == {}
    assert Event.objects.values().get(pk=moved["id"]) == moved


def test_events_already_due_and_instants_set_by_hand_are_left_alone(use_zone_database):
    # given two Almaty events computed with 2023d: one an operator made due now,
    # the other moved in SQL to an instant its local time does not describe
    use_zone_database("old")
    due, by_hand = birthday(recipient()), birthday(recipient(born=date(1991, 6, 16)))
    event_make_due_now(event=due)
    Event.objects.filter(pk=by_hand.pk).update(target_timestamp_utc=at(by_hand, 7))
    due, by_hand = (Event.objects.values().get(pk=e.pk) for e in (due, by_hand))

    # when the events follow the machine's database
    use_zone_database("current")
    result = events_follow_zone_data()

    # then neither moved
    assert result.moved == {}
    assert Event.objects.values().get(pk=due["id"]) == due
    assert Event.objects.values().get(pk=by_hand["id"]) == by_hand


def test_an_event_the_new_rules_make_earlier_than_now_is_claimed_by_the_same_run(settings, look_at_once):
    # given an Almaty event due in 30 minutes by rules that put Almaty at UTC+4:
    # by the machine's (UTC+5) its 10:30 local was 30 minutes ago
    settings.WEBHOOK_URL = "http://127.0.0.1:9/hook"
    event = birthday(recipient())
    stored = (timezone.now() + timedelta(minutes=30)).replace(microsecond=0)
    wall = (stored + timedelta(hours=4)).replace(tzinfo=None)
    Event.objects.filter(pk=event.pk).update(
        target_timestamp_utc=stored, target_timestamp_local=f"{wall.isoformat()}+04:00"
    )

    # when a scheduler runs
    Scheduler(once=True).run()

    # then the event was moved an hour earlier, and claimed as due, not failed as late
    event.refresh_from_db()
    assert event.target_timestamp_utc == stored - timedelta(hours=1)
    assert event.status == EventStatus.PROCESSING


def test_a_process_with_older_data_than_the_events_follow_moves_nothing(use_zone_database, caplog):
    # given Almaty events that follow the machine's database
    user = recipient()
    events_follow_zone_data()
    current = Event.objects.values().get(pk=birthday(user).pk)

    # when a process with 2023d looks
    use_zone_database("old")
    with caplog.at_level(logging.WARNING, logger="scheduling"):
        result = events_follow_zone_data()

    # then it moves nothing back, says why, and the record still names the newer data
    assert (result.moved, result.complete) == ({}, True)
    assert Event.objects.values().get(pk=current["id"]) == current
    assert "older than" in caplog.text
    assert EventZoneData.objects.get().version != OLD_VERSION


def test_the_pass_reads_the_pending_events_through_the_claims_index(production_plan):
    # Enough pending events over the year that a batch is a small part of them, as in production.
    users_bulk_create_with_events(
        rows=[
            {
                "first_name": "A",
                "last_name": "B",
                "date_of_birth": date(1990, 1, 1) + timedelta(days=i % 365),
                "timezone": ("Asia/Almaty", "Europe/London")[i % 2],
            }
            for i in range(3000)
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Event._meta.db_table}")

    _, plan = production_plan(
        lambda: events_follow_zone_data(batch_size=100), "ORDER BY target_timestamp_utc, id"
    )

    assert "event_pending_due_idx" in plan, plan


@pytest.mark.django_db(databases=[])
def test_the_version_comes_from_the_first_zone_directory_else_the_tzdata_package(
    use_zone_database, old_tzdata
):
    use_zone_database("old")
    assert zonedata.zone_data() == zonedata.ZoneData(
        version=OLD_VERSION, path=str(old_tzdata / "tzdata" / "zoneinfo")
    )

    zoneinfo.reset_tzpath(to=[])
    zonedata.zone_data_refresh()

    assert zonedata.zone_data_version() == tzdata.IANA_VERSION


@pytest.mark.django_db(databases=[])
def test_replacing_the_zone_files_under_a_running_process_drops_its_cached_zones(
    use_zone_database, old_tzdata, tmp_path
):
    # given a process whose zone directory holds 2023d, with Almaty loaded
    directory = tmp_path / "zoneinfo"
    directory.symlink_to(old_tzdata / "tzdata" / "zoneinfo")
    zoneinfo.reset_tzpath(to=[str(directory)])
    zonedata.zone_data_refresh()
    june = datetime(2027, 6, 15, 9)
    assert load_timezone("Asia/Almaty").utcoffset(june) == timedelta(hours=6)

    # when the directory is replaced by the newer database, as a package upgrade does
    (tmp_path / "next").symlink_to(os.path.dirname(tzdata.__file__) + "/zoneinfo")
    os.replace(tmp_path / "next", directory)

    # then the next look sees it once, and Almaty follows the new rules
    assert zonedata.zone_data_refresh() is True
    assert zonedata.zone_data_refresh() is False
    assert zonedata.zone_data_version() == tzdata.IANA_VERSION
    assert load_timezone("Asia/Almaty").utcoffset(june) == timedelta(hours=5)


# --- the operator's command ---------------------------------------------------------------


def test_the_command_checks_then_moves_the_pending_events_to_this_hosts_data(use_zone_database):
    # given events that follow 2023d
    use_zone_database("old")
    almaty = birthday(recipient())
    with pytest.raises(CommandError, match=f"follow data not yet known, not {OLD_VERSION}"):
        call_command("follow_zone_data", check=True, stdout=StringIO())
    call_command("follow_zone_data", stdout=StringIO())
    call_command("follow_zone_data", check=True, stdout=StringIO())

    # when this host's data is upgraded, --check says they are behind and changes nothing
    use_zone_database("current")
    with pytest.raises(CommandError, match=f"follow {OLD_VERSION}, not {zonedata.zone_data_version()}"):
        call_command("follow_zone_data", check=True, stdout=StringIO())
    assert birthday(almaty.user).target_timestamp_utc == at(almaty, 3)

    # then the command moves them, says how many per zone, and --check agrees
    out = StringIO()
    call_command("follow_zone_data", stdout=out)
    assert birthday(almaty.user).target_timestamp_utc == at(almaty, 4)
    assert (
        f"Every PENDING event follows {zonedata.zone_data_version()}; 1 moved now.\n  Asia/Almaty: 1"
        in out.getvalue()
    )
    call_command("follow_zone_data", check=True, stdout=StringIO())


def test_the_command_on_a_host_older_than_the_events_moves_nothing_and_fails(use_zone_database):
    use_zone_database("current")
    almaty = birthday(recipient())
    events_follow_zone_data()

    use_zone_database("old")
    with pytest.raises(CommandError, match="rules only go forward"):
        call_command("follow_zone_data", stdout=StringIO())

    assert Event.objects.values().get(pk=almaty.pk)["target_timestamp_utc"] == at(almaty, 4)
    assert EventZoneData.objects.get().version != OLD_VERSION
