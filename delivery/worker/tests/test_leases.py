"""Lease renewal: a worker extends the leases of the deliveries it has in hand, and of nothing else."""

import json
import uuid
from datetime import timedelta

import pytest
from django.db.models import TextField
from django.db.models.functions import Cast
from django.utils import timezone

from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, DeliveryStatus
from delivery.tests.pipeline import create_due_users
from delivery.worker.leases import deliveries_claim, deliveries_renew_leases

pytestmark = pytest.mark.django_db

SHORT = timedelta(seconds=5)
LONG = timedelta(minutes=10)


@pytest.fixture
def queued(delivery_settings):
    create_due_users(4)
    deliveries_enqueue_due(batch_size=10)
    return list(Delivery.objects.order_by("id"))


def lease_ends(ids) -> dict:
    return dict(Delivery.objects.filter(id__in=ids).values_list("id", "locked_until"))


def test_renewal_extends_only_the_leases_of_the_deliveries_the_worker_has_in_hand(queued):
    # Given four deliveries claimed by w1, of which it still has two in hand: the other two
    # are SENDING under its name on a new primary that lost the commits recording them
    claimed = deliveries_claim(worker="w1", limit=10, lease=SHORT)
    in_hand, recorded_on_a_lost_timeline = [c.id for c in claimed[:2]], [c.id for c in claimed[2:]]
    before = lease_ends([c.id for c in claimed])

    # When w1 renews its leases
    renewed = deliveries_renew_leases(worker="w1", ids=in_hand, lease=LONG)

    # Then only the two in hand outlast the short lease; the others run out and can be taken over
    after = lease_ends([c.id for c in claimed])
    assert renewed == 2
    assert all(after[i] >= timezone.now() + LONG - timedelta(minutes=1) for i in in_hand)
    assert all(after[i] == before[i] for i in recorded_on_a_lost_timeline)


def test_renewal_leaves_another_workers_lease_and_a_row_no_longer_sending_alone(queued):
    # Given one delivery w2 holds, one handed back to the queue and one w1 holds
    theirs = deliveries_claim(worker="w2", limit=1, lease=SHORT)[0]
    mine = deliveries_claim(worker="w1", limit=1, lease=SHORT)[0]
    # The claims take the due order, not the ids' order: any row neither claimed.
    back_in_queue = next(d for d in queued if d.id not in (theirs.id, mine.id))
    before = lease_ends([theirs.id, back_in_queue.id])

    # When w1 renews, naming all three (a stale list)
    renewed = deliveries_renew_leases(worker="w1", ids=[theirs.id, back_in_queue.id, mine.id], lease=LONG)

    # Then only its own SENDING row moved
    assert renewed == 1
    assert lease_ends([theirs.id, back_in_queue.id]) == before
    assert Delivery.objects.get(id=back_in_queue.id).status == DeliveryStatus.QUEUED


def test_a_worker_with_nothing_in_hand_renews_nothing(queued):
    claimed = deliveries_claim(worker="w1", limit=10, lease=SHORT)
    before = lease_ends([c.id for c in claimed])

    assert deliveries_renew_leases(worker="w1", ids=[], lease=LONG) == 0
    assert lease_ends([c.id for c in claimed]) == before


def test_a_claimed_delivery_carries_its_row_as_stored_with_the_types_django_reads(queued):
    # Given one delivery queued again by an operator (requeued_at set) beside the others
    requeued = queued[0]
    Delivery.objects.filter(id=requeued.id).update(requeued_at=timezone.now() + timedelta(microseconds=7))

    # When a worker claims them all (the claim's rows come back in binary)
    claimed = {c.id: c for c in deliveries_claim(worker="w1", limit=10, lease=SHORT)}

    # Then each is its row: the body as the stored JSON's text, the timestamps aware and exact to the microsecond
    rows = Delivery.objects.annotate(payload_text=Cast("payload", TextField())).in_bulk(list(claimed))
    assert len(claimed) == 4
    for delivery_id, c in claimed.items():
        row = rows[delivery_id]
        assert isinstance(c.body, str) and c.body == row.payload_text
        assert json.loads(c.body) == row.payload
        assert c.event_id == row.event_id and isinstance(c.event_id, uuid.UUID)
        assert (c.idempotency_key, c.endpoint_key, c.attempt, c.max_attempts) == (
            row.idempotency_key,
            row.endpoint_key,
            row.attempts,
            row.max_attempts,
        )
        assert c.due_at == row.next_attempt_at and c.due_at.utcoffset() == timedelta(0)
        assert c.queued_at == (row.requeued_at or row.created_at)
    assert claimed[requeued.id].queued_at == rows[requeued.id].requeued_at
