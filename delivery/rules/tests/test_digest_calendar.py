"""The digest calendar's rule as tables: which days a digest goes, which dates it names, its period and key,
when the next one is (never in a period already built), and its heading in English and German."""

import hashlib
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest

from delivery.models import Weekend
from delivery.rules.digest_calendar import (
    dates_named,
    digest_date_naming,
    digest_heading,
    digest_key,
    digest_period,
    line_day,
    next_digest,
    sends_on,
)

BERLIN = ZoneInfo("Europe/Berlin")
TUE = date(2026, 12, 1)  # a Tuesday of ISO week 49
FRI = date(2026, 12, 4)
SAT = date(2026, 12, 5)
MON = date(2026, 12, 7)  # ISO week 50
D = timedelta(days=1)
ON, FRIDAY_BEFORE, MONDAY_AFTER = Weekend.ON_THE_DAY, Weekend.FRIDAY_BEFORE, Weekend.MONDAY_AFTER


@pytest.mark.parametrize(
    ("day", "weekend", "days_ahead", "weekday", "sends", "first", "last", "period"),
    [
        # daily, on the day: today's key is the one it always was (its period is its date)
        (TUE, ON, 0, None, True, TUE, TUE, "2026-12-01"),
        (SAT, ON, 0, None, True, SAT, SAT, "2026-12-05"),
        (FRI, FRIDAY_BEFORE, 0, None, True, FRI, FRI + 2 * D, "2026-12-04"),
        (SAT, FRIDAY_BEFORE, 0, None, False, SAT, SAT, "2026-12-05"),
        (MON, MONDAY_AFTER, 0, None, True, MON - 2 * D, MON, "2026-12-07"),
        # ahead of the day: the dates move on, the period is the date and how far ahead
        (TUE, ON, 7, None, True, TUE + 7 * D, TUE + 7 * D, "2026-12-01+7"),
        (TUE, ON, 1, None, True, TUE + D, TUE + D, "2026-12-01+1"),
        (TUE, ON, 30, None, True, TUE + 30 * D, TUE + 30 * D, "2026-12-01+30"),
        (FRI, FRIDAY_BEFORE, 7, None, True, FRI + 7 * D, FRI + 9 * D, "2026-12-04+7"),
        (MON, MONDAY_AFTER, 7, None, True, MON + 5 * D, MON + 7 * D, "2026-12-07+7"),
        # weekly: its weekday only, seven days from its date (plus days ahead), once per ISO week
        (TUE, ON, 0, "TUESDAY", True, TUE, TUE + 6 * D, "2026-W49"),
        (FRI, ON, 0, "TUESDAY", False, FRI, FRI + 6 * D, "2026-W49"),
        (TUE, ON, 7, "TUESDAY", True, TUE + 7 * D, TUE + 13 * D, "2026-W49"),
        (MON, ON, 0, "MONDAY", True, MON, MON + 6 * D, "2026-W50"),
        (date(2027, 1, 1), ON, 0, "FRIDAY", True, date(2027, 1, 1), date(2027, 1, 7), "2026-W53"),
    ],
)
def test_the_days_a_digest_goes_the_dates_it_names_and_its_period(
    day, weekend, days_ahead, weekday, sends, first, last, period
):
    assert sends_on(day=day, weekend=weekend, weekday=weekday) is sends
    assert dates_named(day=day, weekend=weekend, days_ahead=days_ahead, weekday=weekday) == (first, last)
    assert digest_period(day=day, weekday=weekday, days_ahead=days_ahead) == period


def test_a_digests_key_is_its_destinations_and_periods_and_today_keeps_its_old_one():
    keys = {
        digest_key(destination_id=1, period=period) for period in ("2026-12-01", "2026-12-01+7", "2026-W49")
    }
    assert len(keys) == 3 and all(len(key) == 32 and key.startswith("digest-") for key in keys)
    assert digest_key(destination_id=1, period="2026-W49") != digest_key(destination_id=2, period="2026-W49")
    # The hash of (destination, date) as it was before periods: a digest of the day keeps its key.
    old = "digest-" + hashlib.sha256(b"digest:1:2026-12-01").hexdigest()[:25]
    assert digest_key(destination_id=1, period=digest_period(day=TUE, weekday=None)) == old


def _at(day: date, hour: int = 9, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=BERLIN)


@pytest.mark.parametrize(
    ("weekday", "after", "after_date", "expected"),
    [
        # daily: later today, else tomorrow; never the date just built
        (None, _at(TUE, 8), None, TUE),
        (None, _at(TUE, 10), None, TUE + D),
        (None, _at(TUE, 8), TUE, TUE + D),
        # weekly on Thursday: this week's Thursday, or next week's once it passed
        ("THURSDAY", _at(TUE, 8), None, date(2026, 12, 3)),
        ("THURSDAY", _at(date(2026, 12, 3), 10), None, date(2026, 12, 10)),
        # this week's was built (on Tuesday, before the weekday moved to Thursday): next week's Thursday
        ("THURSDAY", _at(TUE, 10), TUE, date(2026, 12, 10)),
        # last week's was built: this week's
        ("THURSDAY", _at(TUE, 10), TUE - 7 * D, date(2026, 12, 3)),
        # Sunday's built, moved to Monday the same evening: the next day is another ISO week
        ("MONDAY", _at(MON - D, 20), MON - D, MON),
    ],
)
def test_the_next_digest_is_in_a_period_not_built_yet(weekday, after, after_date, expected):
    day, instant = next_digest(
        at=time(9),
        timezone_name="Europe/Berlin",
        weekend=ON,
        after=after,
        after_date=after_date,
        weekday=weekday,
    )
    assert (day, instant) == (expected, _at(expected))


@pytest.mark.parametrize(
    ("first", "last", "days_ahead", "weekly", "language", "heading"),
    [
        (TUE, TUE, 0, False, "en", "Today, Tuesday 1 December:"),
        (TUE, TUE, 0, False, "de", "Heute, Dienstag, 1. Dezember:"),
        (TUE + D, TUE + D, 1, False, "en", "Tomorrow, Wednesday 2 December:"),
        (TUE + 7 * D, TUE + 7 * D, 7, False, "en", "In a week, Tuesday 8 December:"),
        (TUE + 7 * D, TUE + 7 * D, 7, False, "de", "In einer Woche, Dienstag, 8. Dezember:"),
        (TUE + 3 * D, TUE + 3 * D, 3, False, "en", "In 3 days, Friday 4 December:"),
        (TUE + 3 * D, TUE + 3 * D, 3, False, "de", "In 3 Tagen, Freitag, 4. Dezember:"),
        (FRI, FRI + 2 * D, 0, False, "en", "Friday 4 December to Sunday 6 December:"),
        (TUE, TUE + 6 * D, 0, True, "en", "The coming seven days, Tuesday 1 December to Monday 7 December:"),
        (
            TUE,
            TUE + 6 * D,
            0,
            True,
            "de",
            "Die kommenden sieben Tage, Dienstag, 1. Dezember bis Montag, 7. Dezember:",
        ),
        # a language it has no words in: English
        (TUE, TUE, 0, False, "fr", "Today, Tuesday 1 December:"),
    ],
)
def test_the_heading_in_english_and_german(first, last, days_ahead, weekly, language, heading):
    assert (
        digest_heading(
            day=TUE, first=first, last=last, days_ahead=days_ahead, weekly=weekly, language=language
        )
        == heading
    )


@pytest.mark.parametrize(
    ("occurrence", "first", "last", "weekly", "language", "said"),
    [
        (TUE, TUE, TUE, False, "en", ""),
        (TUE + 7 * D, TUE + 7 * D, TUE + 7 * D, False, "en", ""),
        (FRI, FRI, FRI + 2 * D, False, "en", ""),  # Friday's own line, sent on Friday
        (SAT, FRI, FRI + 2 * D, False, "de", " (Samstag)"),
        (TUE, TUE, TUE + 6 * D, True, "en", " (Tuesday)"),  # a week's lines each say their day
        (TUE + 2 * D, TUE, TUE + 6 * D, True, "de", " (Donnerstag)"),
    ],
)
def test_a_line_says_its_day_when_the_digest_names_several(occurrence, first, last, weekly, language, said):
    day = FRI if not weekly and first == FRI else TUE
    assert (
        line_day(
            occurrence_date=occurrence, day=day, first=first, last=last, weekly=weekly, language=language
        )
        == said
    )


# --- read backwards: which digest names an occurrence (the upcoming page's) -------------------


@pytest.mark.parametrize(
    ("occurrence", "weekend", "days_ahead", "weekday", "named_by"),
    [
        (date(2026, 12, 3), "ON_THE_DAY", 0, None, date(2026, 12, 3)),
        (date(2026, 12, 10), "ON_THE_DAY", 7, None, date(2026, 12, 3)),
        # Saturday, named the Friday before
        (date(2026, 12, 5), "FRIDAY_BEFORE", 0, None, date(2026, 12, 4)),
        (date(2026, 12, 5), "MONDAY_AFTER", 0, None, date(2026, 12, 7)),
        # weekly on Mondays: Thursday 3 is in Monday 30 November's seven days
        (date(2026, 12, 3), "ON_THE_DAY", 0, "MONDAY", date(2026, 11, 30)),
        (date(2026, 12, 6), "ON_THE_DAY", 0, "MONDAY", date(2026, 11, 30)),
        (date(2026, 12, 7), "ON_THE_DAY", 0, "MONDAY", date(2026, 12, 7)),
        # weekly a week ahead: Thursday 10 December is named on Monday 30 November
        (date(2026, 12, 10), "ON_THE_DAY", 7, "MONDAY", date(2026, 11, 30)),
    ],
)
def test_the_digest_naming_an_occurrence_is_dates_named_read_backwards(
    occurrence, weekend, days_ahead, weekday, named_by
):
    day = digest_date_naming(
        occurrence_date=occurrence, weekend=weekend, days_ahead=days_ahead, weekday=weekday
    )

    assert day == named_by
    first, last = dates_named(day=day, weekend=weekend, days_ahead=days_ahead, weekday=weekday)
    assert first <= occurrence <= last
