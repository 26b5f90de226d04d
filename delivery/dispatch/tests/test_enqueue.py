"""The scheduler's claim with recipients' own send times: computed from the claimed rows, never looked up."""

from datetime import UTC, date, datetime, time, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

from delivery.destinations.services import destinations_seed_default
from delivery.dispatch.claim import _claim_sql, deliveries_enqueue_due
from scheduling.models import Event, EventStatus
from users.services import user_create, users_bulk_create_with_events

# The claim sends to destinations: WEBHOOK_URL seeds the default one.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("default_destination")]


@freeze_time("2027-05-05T06:00:00Z")
def test_the_next_occurrence_a_claim_creates_follows_the_recipients_send_time():
    user = user_create(
        first_name="Ada",
        last_name="L",
        date_of_birth=date(1990, 5, 6),
        timezone="Asia/Kolkata",
        send_time="10:30",
    )
    Event.objects.filter(user=user).update(target_timestamp_utc=datetime(2027, 5, 5, 5, 0, tzinfo=UTC))

    assert deliveries_enqueue_due().queued == 1

    upcoming = Event.objects.get(user=user, status=EventStatus.PENDING)
    assert upcoming.occurrence_date == date(2028, 5, 6)
    assert upcoming.target_timestamp_local == "2028-05-06T10:30:00+05:30"
    assert upcoming.target_timestamp_utc == datetime(2028, 5, 6, 5, 0, tzinfo=UTC)


def _claim_statements(batch: int) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        assert deliveries_enqueue_due(batch_size=batch).claimed == batch
    return [query["sql"].split(" ", 1)[0] for query in captured.captured_queries]


def test_a_claim_batch_sends_the_same_statements_for_5_recipients_as_for_60_each_with_their_own_send_time():
    # Every recipient a different send time: a lookup per recipient would show as statements per row.
    users_bulk_create_with_events(
        rows=[
            {
                "first_name": f"U{i}",
                "last_name": "Load",
                "date_of_birth": date(1990, 1 + i % 12, 1 + i % 28),
                "timezone": "Europe/London",
                "send_time": time(i % 24, (7 * i) % 60),
            }
            for i in range(65)
        ]
    )
    Event.objects.update(target_timestamp_utc=datetime.now(UTC) - timedelta(seconds=1))
    destinations_seed_default()  # before, not within, the first batch measured

    assert _claim_statements(5) == _claim_statements(60)


def test_the_claims_select_reads_the_send_time_from_the_recipients_join_and_visibility_in_the_same_select():
    sql = _claim_sql()

    assert "u.send_time" in sql
    # The recipient, then the person's visibility choice and the company default (one probe each),
    # and the person's opt-outs in one subquery through their unique (user, destination) index.
    assert sql.count(" JOIN ") == 3 and sql.count("LEFT JOIN") == 2 and sql.upper().count("SELECT") == 2
    assert "array_agg(o.destination_id)" in sql


def test_a_claim_batch_sends_the_same_statements_whether_none_half_or_all_of_its_recipients_have_their_own_send_time():
    from users.models import User

    destinations_seed_default()  # before, not within, the first batch measured
    statements = {}
    for own in (0, 20, 40):
        Event.objects.all().delete()
        User.objects.all().delete()
        users_bulk_create_with_events(
            rows=[
                {
                    "first_name": f"U{i}",
                    "last_name": "Load",
                    "date_of_birth": date(1990, 1 + i % 12, 1 + i % 28),
                    "timezone": "Europe/London",
                    "send_time": time(i % 24, (7 * i) % 60) if i < own else None,
                }
                for i in range(40)
            ]
        )
        Event.objects.update(target_timestamp_utc=datetime.now(UTC) - timedelta(seconds=1))
        statements[own] = _claim_statements(40)

    assert statements[0] == statements[20] == statements[40]
