"""Recording a batch of answers from several endpoints: the endpoint rows are written in one order."""

import re
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from delivery.dispatch.scheduler import Scheduler
from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, Endpoint
from delivery.receivers.protocol import SendResult
from delivery.rules.answers import Signal
from delivery.selectors import delivery_attempts
from delivery.tests.pipeline import create_due_users, destinations_create_at, key_of
from delivery.worker.leases import deliveries_claim
from delivery.worker.record import deliveries_record
from scheduling.models import Event, EventStatus

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


def delivered(claimed, *, at) -> list[SendResult]:
    """A 200 for each of `claimed`, answered at `at`, in the order given."""
    return [
        SendResult(
            delivery=d,
            outcome=AttemptOutcome.DELIVERED,
            signal=Signal.SUCCESS,
            started_at=at,
            finished_at=at,
            duration_ms=1,
            status_code=200,
        )
        for d in claimed
    ]


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
    answers = delivered(sorted(claimed, key=lambda d: d.endpoint_key, reverse=True), at=now)

    with CaptureQueriesContext(connection) as queries:
        summary = deliveries_record(worker="w1", results=answers, healthy=healthy)

    assert summary.delivered == len(claimed)
    written = endpoint_writes(queries.captured_queries)
    assert sorted(set(written)) == KEYS
    assert written == sorted(written)


@pytest.mark.django_db(transaction=True)
def test_a_batch_of_successes_is_recorded_in_two_round_trips_and_the_commit_and_concludes_its_events(
    delivery_settings, monkeypatch
):
    # The worker's thread waits for every round trip of a record: the moves go with the conclusion's lock and
    # read, the attempt log with the events' moves and the endpoint's last success, then the commit.
    delivery_settings.WEBHOOK_URL = URLS[0]
    create_due_users(20)
    Scheduler(once=True).run()
    claimed = deliveries_claim(worker="w1", limit=100, lease=timedelta(seconds=30))
    now = timezone.now()
    answers = delivered(claimed, at=now)
    syncs = []
    monkeypatch.setattr(psycopg.Pipeline, "sync", counting(psycopg.Pipeline.sync, syncs))

    summary = deliveries_record(worker="w1", results=answers, healthy={claimed[0].endpoint_key})

    assert summary.delivered == 20
    assert len(syncs) == 2
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == 20
    # Each success recorded on its delivery, with no attempt row of its own, and shown as its attempt.
    assert DeliveryAttempt.objects.count() == 0
    shown = delivery_attempts(delivery_ids=[d.id for d in claimed])
    assert sorted(
        (a["delivery_id"], a["number"], a["outcome"], a["worker"]) for rows in shown.values() for a in rows
    ) == sorted((d.id, 1, AttemptOutcome.DELIVERED, "w1") for d in claimed)


@pytest.mark.django_db(transaction=True)
def test_an_answer_whose_lease_was_lost_leaves_its_event_processing_and_logs_no_attempt(delivery_settings):
    # The conclusion is read for every event the batch would end; one whose delivery another worker took over
    # is read all the same, and left alone.
    delivery_settings.WEBHOOK_URL = URLS[0]
    create_due_users(2)
    Scheduler(once=True).run()
    claimed = deliveries_claim(worker="w1", limit=100, lease=timedelta(seconds=30))
    lost, kept = claimed
    Delivery.objects.filter(id=lost.id).update(locked_by="w2")
    now = timezone.now()
    answers = delivered(claimed, at=now)

    summary = deliveries_record(worker="w1", results=answers)

    assert (summary.delivered, summary.lease_lost) == (1, 1)
    assert Event.objects.get(id=kept.event_id).status == EventStatus.COMPLETED
    assert Event.objects.get(id=lost.event_id).status == EventStatus.PROCESSING
    assert list(delivery_attempts(delivery_ids=[lost.id, kept.id])) == [kept.id]


def counting(method, calls: list):
    def counted(self, *args, **kwargs):
        calls.append(1)
        return method(self, *args, **kwargs)

    return counted


@pytest.mark.parametrize(
    ("state", "failures"), [("FAILING", 5), ("HEALTHY", 2)], ids=["made failing", "failures counted"]
)
def test_successes_from_a_worker_that_last_saw_the_endpoint_healthy_end_what_another_worker_counted_since(
    delivery_settings, state, failures
):
    # Given a worker whose view of the endpoint is a refresh old (healthy, no failure), while another worker
    # has since counted failures there, or made it FAILING
    delivery_settings.WEBHOOK_URL = URLS[0]
    create_due_users(3)
    Scheduler(once=True).run()
    claimed = deliveries_claim(worker="w1", limit=100, lease=timedelta(seconds=30))
    key = claimed[0].endpoint_key
    now = timezone.now()
    changes = {"state": state, "consecutive_failures": failures}
    if state == "FAILING":
        changes |= {"failing_since": now, "next_probe_at": now, "probe_interval": timedelta(seconds=1)}
    Endpoint.objects.filter(key=key).update(**changes)
    answers = delivered(claimed, at=now)

    # When it records a batch that all succeeded
    summary = deliveries_record(worker="w1", results=answers, healthy={key})

    # Then the successes count as any success does: the endpoint is healthy with no failure in a row, and the
    # worker is told so
    endpoint = Endpoint.objects.get(key=key)
    assert (endpoint.state, endpoint.consecutive_failures, endpoint.last_success_at) == ("HEALTHY", 0, now)
    assert summary.delivered == 3
    assert summary.verdicts[key].state == "HEALTHY"


@pytest.mark.django_db(transaction=True)
def test_an_event_completes_alone_only_once_every_one_of_its_deliveries_is_delivered(delivery_settings):
    # An event whose deliveries all end DELIVERED in one record completes in one UPDATE, with no lock or read;
    # one with a delivery still to send stays PROCESSING, and the last record completes it.
    destinations_create_at(URLS[:2])
    create_due_users(2)
    Scheduler(once=True).run()
    first, second = sorted(Event.objects.filter(status=EventStatus.PROCESSING), key=lambda e: e.id)
    both = deliveries_claim(worker="w1", limit=100, lease=timedelta(seconds=30))
    now = timezone.now()
    # Both of the first event's deliveries, and one of the second's.
    answers = delivered(
        [d for d in both if d.event_id == first.id] + [d for d in both if d.event_id == second.id][:1], at=now
    )
    deliveries_record(worker="w1", results=answers)

    assert Event.objects.get(id=first.id).status == EventStatus.COMPLETED
    assert Event.objects.get(id=second.id).status == EventStatus.PROCESSING

    deliveries_record(
        worker="w1", results=delivered([d for d in both if d.event_id == second.id][1:], at=now)
    )

    assert Event.objects.get(id=second.id).status == EventStatus.COMPLETED
    assert Event.objects.get(id=second.id).executed_at is not None
