"""Migration 0027: the digests built before periods were kept get their date as their period (the key they
were made with is the one digest_key gives that period: delivery.rules.tests.test_digest_calendar), before
the (destination, period) uniqueness is made."""

from datetime import date

import pytest
from django.db import connection

from delivery.tests.test_migration_receiver_urls import executor_leaf, migrate

BEFORE = [("delivery", "0026_destination_opt_out")]
AFTER = [("delivery", "0027_digest_ahead_weekly")]


@pytest.mark.django_db(transaction=True)
def test_older_digests_take_their_date_as_their_period_and_keep_their_key():
    day = date(2026, 12, 1)
    try:
        migrate(BEFORE)
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO delivery_destination (name, url_ciphertext, url_key, url_display, event_types, "
                "audience_labels, excluded_labels, message_overrides, format, personal, enabled, weekend, "
                "mention_recipient, created_by, updated_by, created_at, updated_at, version) VALUES ('d', 'x', "
                "'k', 'https://h/', '{}', '{}', '{}', '{}', 'standard', false, true, 'ON_THE_DAY', false, '', '', "
                "now(), now(), 1) RETURNING id"
            )
            [destination_id] = cursor.fetchone()
            for offset, local_date in enumerate((day, date(2026, 12, 2))):
                cursor.execute(
                    "INSERT INTO delivery_digest (destination_id, local_date, first_date, last_date, "
                    "idempotency_key, entries, created_at) VALUES (%s, %s, %s, %s, %s, '[]', now())",
                    [destination_id, local_date, local_date, local_date, f"key{offset}"],
                )

        migrate(AFTER)

        with connection.cursor() as cursor:
            cursor.execute("SELECT period, heading, language FROM delivery_digest ORDER BY local_date")
            assert cursor.fetchall() == [("2026-12-01", "", "en"), ("2026-12-02", "", "en")]
    finally:
        migrate(executor_leaf())
