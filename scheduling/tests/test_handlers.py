"""Time arithmetic of the birthday handler: zones, the date line, Feb 29 and DST."""

from datetime import UTC, date, datetime
from types import SimpleNamespace

import pytest
from django.test import override_settings

from scheduling.handlers import Recipient, RecipientRow, get_handler
from scheduling.handlers.birthday import birthday_in_year
from scheduling.models import EventType

UTC = UTC


def next_birthday(dob: date, tz: str, now: datetime, after_date: date | None = None):
    user = SimpleNamespace(date_of_birth=dob, timezone=tz, first_name="A", last_name="B", send_time=None)
    return get_handler(EventType.BIRTHDAY).next_occurrence(user=user, now=now, after_date=after_date)


@pytest.mark.parametrize(
    "tz, occurrence, expected_utc, expected_local",
    [
        (
            "America/New_York",
            date(2027, 3, 1),
            datetime(2027, 3, 1, 14, 0, tzinfo=UTC),
            "2027-03-01T09:00:00-05:00",
        ),
        (
            "America/New_York",
            date(2027, 7, 1),
            datetime(2027, 7, 1, 13, 0, tzinfo=UTC),
            "2027-07-01T09:00:00-04:00",
        ),
        (
            "Europe/London",
            date(2027, 1, 15),
            datetime(2027, 1, 15, 9, 0, tzinfo=UTC),
            "2027-01-15T09:00:00+00:00",
        ),
        (
            "Europe/London",
            date(2027, 7, 15),
            datetime(2027, 7, 15, 8, 0, tzinfo=UTC),
            "2027-07-15T09:00:00+01:00",
        ),
        (
            "Australia/Sydney",
            date(2027, 1, 15),
            datetime(2027, 1, 14, 22, 0, tzinfo=UTC),
            "2027-01-15T09:00:00+11:00",
        ),
        (
            "Australia/Sydney",
            date(2027, 7, 15),
            datetime(2027, 7, 14, 23, 0, tzinfo=UTC),
            "2027-07-15T09:00:00+10:00",
        ),
        ("Asia/Tokyo", date(2027, 5, 5), datetime(2027, 5, 5, 0, 0, tzinfo=UTC), "2027-05-05T09:00:00+09:00"),
        (
            "Asia/Kolkata",
            date(2027, 5, 5),
            datetime(2027, 5, 5, 3, 30, tzinfo=UTC),
            "2027-05-05T09:00:00+05:30",
        ),
        (
            "Asia/Kathmandu",
            date(2027, 5, 5),
            datetime(2027, 5, 5, 3, 15, tzinfo=UTC),
            "2027-05-05T09:00:00+05:45",
        ),
        (
            "Pacific/Chatham",
            date(2027, 1, 10),
            datetime(2027, 1, 9, 19, 15, tzinfo=UTC),
            "2027-01-10T09:00:00+13:45",
        ),
        (
            "Pacific/Chatham",
            date(2027, 7, 10),
            datetime(2027, 7, 9, 20, 15, tzinfo=UTC),
            "2027-07-10T09:00:00+12:45",
        ),
        (
            "Pacific/Kiritimati",
            date(2027, 5, 5),
            datetime(2027, 5, 4, 19, 0, tzinfo=UTC),
            "2027-05-05T09:00:00+14:00",
        ),
        (
            "Pacific/Pago_Pago",
            date(2027, 5, 5),
            datetime(2027, 5, 5, 20, 0, tzinfo=UTC),
            "2027-05-05T09:00:00-11:00",
        ),
        (
            "Australia/Lord_Howe",
            date(2027, 1, 10),
            datetime(2027, 1, 9, 22, 0, tzinfo=UTC),
            "2027-01-10T09:00:00+11:00",
        ),
        (
            "Australia/Lord_Howe",
            date(2027, 7, 10),
            datetime(2027, 7, 9, 22, 30, tzinfo=UTC),
            "2027-07-10T09:00:00+10:30",
        ),
        (
            "Africa/Casablanca",
            date(2027, 5, 5),
            datetime(2027, 5, 5, 8, 0, tzinfo=UTC),
            "2027-05-05T09:00:00+01:00",
        ),
    ],
)
# The grid holds under the machine's time zone database and an older one
# (scheduling/tests/conftest.py): none of its zones changed its rules for 2027 between them.
@pytest.mark.parametrize("zone_database", ["current", "old"], indirect=True)
def test_send_time_is_nine_local_in_every_kind_of_zone(
    zone_database, tz, occurrence, expected_utc, expected_local
):
    result = next_birthday(
        occurrence.replace(year=1990),
        tz,
        datetime(2027, 1, 1, tzinfo=UTC) if occurrence.month > 1 else datetime(2026, 12, 1, tzinfo=UTC),
    )

    assert result.occurrence_date == occurrence
    assert result.target_utc == expected_utc
    assert result.target_local.isoformat() == expected_local


def test_casablanca_ramadan_offset_is_followed():
    # Morocco moves to UTC+0 during Ramadan (in 2027 from about Feb 7 to Mar 14).
    result = next_birthday(date(1990, 2, 20), "Africa/Casablanca", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.target_local.isoformat() == "2027-02-20T09:00:00+00:00"
    assert result.target_utc == datetime(2027, 2, 20, 9, 0, tzinfo=UTC)


def test_jan_1_birthday_in_kiritimati_is_on_dec_31_in_utc():
    result = next_birthday(date(1990, 1, 1), "Pacific/Kiritimati", datetime(2026, 12, 30, tzinfo=UTC))

    assert result.occurrence_date == date(2027, 1, 1)
    assert result.target_utc == datetime(2026, 12, 31, 19, 0, tzinfo=UTC)


def test_dec_31_birthday_in_pago_pago_is_sent_at_20_utc():
    result = next_birthday(date(1990, 12, 31), "Pacific/Pago_Pago", datetime(2026, 12, 30, tzinfo=UTC))

    assert result.occurrence_date == date(2026, 12, 31)
    assert result.target_utc == datetime(2026, 12, 31, 20, 0, tzinfo=UTC)


def test_dec_31_in_pago_pago_while_utc_is_already_in_the_new_year():
    # 2027-01-01 02:00 UTC is still 2026-12-31 15:00 in Pago Pago: today's send
    # has passed, so the next one is 2027-12-31, not 2026's nor a skipped year.
    result = next_birthday(date(1990, 12, 31), "Pacific/Pago_Pago", datetime(2027, 1, 1, 2, 0, tzinfo=UTC))

    assert result.occurrence_date == date(2027, 12, 31)


def test_new_years_day_in_kiritimati_already_started_while_utc_is_still_in_december():
    # 2026-12-31 20:00 UTC is 2027-01-01 10:00 in Kiritimati: the 09:00 send has passed.
    result = next_birthday(date(1990, 1, 1), "Pacific/Kiritimati", datetime(2026, 12, 31, 20, 0, tzinfo=UTC))

    assert result.occurrence_date == date(2028, 1, 1)


@pytest.mark.parametrize(
    "year, expected",
    [
        (2028, date(2028, 2, 29)),
        (2027, date(2027, 2, 28)),
        (2100, date(2100, 2, 28)),
        (2000, date(2000, 2, 29)),
    ],
)
def test_feb_29_birthday_falls_on_feb_28_in_common_and_century_years(year, expected):
    assert birthday_in_year(date(1996, 2, 29), year) == expected


def test_feb_29_birthday_next_occurrence_in_a_common_year_is_feb_28():
    result = next_birthday(date(1996, 2, 29), "Europe/London", datetime(2026, 11, 22, tzinfo=UTC))

    assert result.occurrence_date == date(2027, 2, 28)


def test_feb_29_birthday_next_occurrence_in_a_leap_year_is_feb_29():
    result = next_birthday(date(1996, 2, 29), "Europe/London", datetime(2027, 3, 1, tzinfo=UTC))

    assert result.occurrence_date == date(2028, 2, 29)


def test_created_on_the_birthday_before_send_time_gets_today():
    now = datetime(2026, 11, 22, 13, 59, tzinfo=UTC)  # 08:59 in New York

    result = next_birthday(date(1990, 11, 22), "America/New_York", now)

    assert result.occurrence_date == date(2026, 11, 22)
    assert result.target_utc == datetime(2026, 11, 22, 14, 0, tzinfo=UTC)


def test_created_on_the_birthday_after_send_time_gets_next_year():
    now = datetime(2026, 11, 22, 14, 1, tzinfo=UTC)  # 09:01 in New York

    result = next_birthday(date(1990, 11, 22), "America/New_York", now)

    assert result.occurrence_date == date(2027, 11, 22)


@override_settings(EVENT_SEND_TIME="02:30")
def test_send_time_inside_a_dst_gap_moves_forward_by_the_gap():
    # 2027-03-14 02:00 EST -> 03:00 EDT: 02:30 does not exist, 03:30 EDT is sent.
    result = next_birthday(date(1990, 3, 14), "America/New_York", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.target_local.isoformat() == "2027-03-14T03:30:00-04:00"
    assert result.target_utc == datetime(2027, 3, 14, 7, 30, tzinfo=UTC)


@override_settings(EVENT_SEND_TIME="01:30")
def test_send_time_inside_a_dst_overlap_takes_the_first():
    # 2027-11-07 02:00 EDT -> 01:00 EST: 01:30 happens twice, the EDT one is first.
    result = next_birthday(date(1990, 11, 7), "America/New_York", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.target_local.isoformat() == "2027-11-07T01:30:00-04:00"
    assert result.target_utc == datetime(2027, 11, 7, 5, 30, tzinfo=UTC)


def test_lord_howe_half_hour_dst_gap():
    # Lord Howe springs forward 02:00 -> 02:30 on 2027-10-03.
    with override_settings(EVENT_SEND_TIME="02:15"):
        result = next_birthday(date(1990, 10, 3), "Australia/Lord_Howe", datetime(2027, 1, 1, tzinfo=UTC))

    assert result.target_local.isoformat() == "2027-10-03T02:45:00+11:00"


def test_after_date_skips_occurrences_already_handled():
    now = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)  # 05:00 in New York, before 09:00

    result = next_birthday(date(1990, 11, 22), "America/New_York", now, after_date=date(2026, 11, 22))

    assert result.occurrence_date == date(2027, 11, 22)


def test_the_day_of_birth_itself_is_not_a_birthday():
    now = datetime(2026, 11, 22, 1, 0, tzinfo=UTC)

    result = next_birthday(date(2026, 11, 22), "Asia/Tokyo", now)

    assert result.occurrence_date == date(2027, 11, 22)


def test_a_recipient_row_holds_every_field_a_handler_reads_and_no_other():
    # Written twice in scheduling.handlers.base (a protocol, and a NamedTuple for the bulk
    # paths): a field added to one and not the other fails here.
    protocol_fields = {name for name, value in vars(Recipient).items() if isinstance(value, property)}
    assert protocol_fields == set(RecipientRow._fields)
