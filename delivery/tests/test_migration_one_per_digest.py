"""Migration 0021: one delivery per digest, guarded by a partial unique index instead of a full one, and back."""

import pytest
from django.db import connection

from delivery.tests.test_migration_receiver_urls import executor_leaf, migrate

BEFORE = [("delivery", "0020_urlparts_url_display")]
AFTER = [("delivery", "0021_one_per_digest_partial")]


def digest_indexes() -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE tablename = 'delivery_delivery' AND indexdef LIKE '%%(digest_id)%%' ORDER BY 1"
        )
        return cursor.fetchall()


@pytest.mark.django_db(transaction=True)
def test_the_full_unique_index_becomes_a_partial_one_and_a_rollback_restores_it():
    try:
        migrate(BEFORE)
        [(before, definition)] = digest_indexes()
        assert "WHERE" not in definition and definition.startswith("CREATE UNIQUE INDEX")

        migrate(AFTER)
        assert [name for name, _ in digest_indexes()] == ["delivery_one_per_digest"]
        assert digest_indexes()[0][1].endswith("WHERE (digest_id IS NOT NULL)")

        migrate(BEFORE)
        [(restored, definition)] = digest_indexes()
        assert (restored, "WHERE" in definition) == (before, False)
    finally:
        migrate(executor_leaf())
