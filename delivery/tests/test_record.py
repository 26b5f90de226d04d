"""Recording a batch of answers from several endpoints: the endpoint rows are written in one order."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from delivery.models import AttemptOutcome
from delivery.scheduler import Scheduler
from delivery.services.leases import deliveries_claim
from delivery.services.record import deliveries_record
from delivery.tests.conftest import create_due_users, destinations_create_at, key_of
from delivery.transport import SendResult

pytestmark = pytest.mark.django_db

URLS = [f"https://receiver{n}.example.org/hook" for n in range(3)]
KEYS = sorted(key_of(url) for url in URLS)


def endpoint_writes(queries) -> list[str]:
    """The keys of the endpoint rows the statements wrote (UPDATE or SELECT ... FOR UPDATE), in order."""
    keys = []
    for query in queries:
        sql = query["sql"]
        if '"delivery_endpoint"' in sql and ("UPDATE" in sql.split(" ", 1)[0] or "FOR UPDATE" in sql):
            keys += re.findall(r"'([0-9a-f]{32})'", sql)
    return keys


@pytest.mark.parametrize(
    "healthy", [set(URLS), set()], ids=["successes on healthy endpoints", "weighed by health"]
)
def test_endpoint_rows_are_written_in_key_order_whatever_order_the_answers_came_back_in(
    delivery_settings, healthy
):
    # Two workers recording answers from the same endpoints in opposite orders deadlocked on their rows.
    delivery_settings.WEBHOOK_URL = ""
    destinations_create_at(URLS)
    create_due_users(4)
    Scheduler(once=True).run()
    claimed = deliveries_claim(worker="w1", limit=100, lease=timedelta(seconds=30))
    assert len({d.endpoint_key for d in claimed}) == 3
    now = timezone.now()
    answers = [
        SendResult(
            delivery=d,
            outcome=AttemptOutcome.DELIVERED,
            started_at=now,
            finished_at=now,
            duration_ms=1,
            status_code=200,
        )
        for d in sorted(claimed, key=lambda d: d.endpoint_key, reverse=True)
    ]

    with CaptureQueriesContext(connection) as queries:
        summary = deliveries_record(worker="w1", results=answers, healthy=healthy)

    assert summary.delivered == len(claimed)
    written = endpoint_writes(queries.captured_queries)
    assert sorted(set(written)) == KEYS
    assert written == sorted(written)
