"""The Delivery state machine: the table, and the one lease-checked UPDATE every status write goes through."""

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, DeliveryStatus
from delivery.states.transitions import DELIVERY_TRANSITIONS, Due, NewLease, Rows, deliveries_transition
from delivery.tests.pipeline import create_due_users, shown_attempts
from delivery.worker.leases import deliveries_claim, deliveries_release
from scheduling.exceptions import InvalidStateTransition

pytestmark = pytest.mark.django_db

QUEUED, SENDING, DELIVERED, DEAD = (
    DeliveryStatus.QUEUED,
    DeliveryStatus.SENDING,
    DeliveryStatus.DELIVERED,
    DeliveryStatus.DEAD,
)
LEASE = timedelta(seconds=30)


@pytest.fixture
def queued(delivery_settings):
    create_due_users(3)
    deliveries_enqueue_due(batch_size=10)
    return list(Delivery.objects.order_by("id"))


def test_the_table_holds_exactly_the_moves_the_product_makes():
    assert set(DELIVERY_TRANSITIONS) == {
        (QUEUED, SENDING),
        (SENDING, DELIVERED),
        (SENDING, QUEUED),
        (SENDING, DEAD),
        (DEAD, QUEUED),
        (QUEUED, DEAD),
        (DELIVERED, QUEUED),
    }


@pytest.mark.parametrize(
    "source, target", [(QUEUED, DELIVERED), (DELIVERED, SENDING), (DEAD, SENDING), (DELIVERED, DEAD)]
)
def test_a_move_outside_the_table_is_refused_and_changes_nothing(queued, source, target):
    before = list(Delivery.objects.values_list("id", "status", "attempts"))

    with pytest.raises(InvalidStateTransition):
        deliveries_transition(
            source=source, target=target, select=Rows(ids=[queued[0].id], attempts=[None]), now=timezone.now()
        )

    assert list(Delivery.objects.values_list("id", "status", "attempts")) == before


def test_a_row_under_lease_is_moved_only_by_its_holder_or_after_it_expired(queued):
    now = timezone.now()
    with pytest.raises(InvalidStateTransition, match="under lease"):
        deliveries_transition(
            source=SENDING, target=DELIVERED, select=Rows(ids=[queued[0].id], attempts=[1]), now=now
        )


def test_entering_sending_always_takes_a_lease(queued):
    with pytest.raises(InvalidStateTransition, match="takes a lease"):
        deliveries_transition(
            source=QUEUED, target=SENDING, select=Due(now=timezone.now(), limit=10), now=timezone.now()
        )


def test_claim_leases_each_row_and_counts_the_attempt(queued):
    claimed = deliveries_claim(worker="w1", limit=10, lease=LEASE)

    assert len(claimed) == 3
    rows = Delivery.objects.filter(id__in=[c.id for c in claimed])
    assert {(r.status, r.locked_by, r.attempts) for r in rows} == {(SENDING, "w1", 1)}
    assert all(r.locked_until > timezone.now() for r in rows)


def test_another_workers_result_does_not_move_a_row_it_no_longer_holds(queued):
    claimed = deliveries_claim(worker="w1", limit=10, lease=LEASE)
    now = timezone.now()

    moved = deliveries_transition(
        source=SENDING,
        target=DELIVERED,
        select=Rows(ids=[c.id for c in claimed], attempts=[c.attempt for c in claimed], held_by="w2"),
        now=now,
    )

    assert moved == []
    assert set(Delivery.objects.values_list("status", flat=True)) == {SENDING}


def test_a_result_for_an_older_attempt_does_not_move_the_row(queued):
    claimed = deliveries_claim(worker="w1", limit=10, lease=LEASE)

    moved = deliveries_transition(
        source=SENDING,
        target=DELIVERED,
        select=Rows(ids=[claimed[0].id], attempts=[claimed[0].attempt - 1], held_by="w1"),
        now=timezone.now(),
    )

    assert moved == []


def test_leaving_sending_releases_the_lease_and_release_uncounts_the_attempt(queued):
    claimed = deliveries_claim(worker="w1", limit=10, lease=LEASE)

    assert deliveries_release(worker="w1", claimed=claimed) == 3

    rows = Delivery.objects.all()
    assert {(r.status, r.locked_by, r.locked_until, r.attempts) for r in rows} == {(QUEUED, "", None, 0)}


def test_an_expired_lease_is_taken_over_its_attempt_logged_as_abandoned(queued):
    claimed = deliveries_claim(worker="lost", limit=10, lease=timedelta(seconds=-1))

    again = deliveries_claim(worker="w2", limit=10, lease=LEASE)

    assert {c.id for c in again} == {c.id for c in claimed}
    assert {c.attempt for c in again} == {2}
    for delivery in Delivery.objects.all():
        assert [(a.number, a.outcome, a.worker) for a in shown_attempts(delivery)] == [
            (1, "ABANDONED", "lost")
        ]


def test_an_expired_lease_is_left_alone_while_take_over_is_held_back(queued):
    deliveries_claim(worker="lost", limit=10, lease=timedelta(seconds=-1))

    again = deliveries_claim(worker="w2", limit=10, lease=LEASE, take_over_expired=False)

    assert again == []
    assert set(Delivery.objects.values_list("locked_by", flat=True)) == {"lost"}


def test_entering_sending_sets_the_lease_it_was_given(queued):
    until = timezone.now() + timedelta(minutes=5)
    rows = deliveries_transition(
        source=QUEUED,
        target=SENDING,
        select=Due(now=timezone.now(), limit=1),
        now=timezone.now(),
        lease=NewLease(worker="w9", until=until),
        returning=("id", "locked_by", "locked_until", "attempts"),
    )

    assert [(r[1], r[2], r[3]) for r in rows] == [("w9", until, 1)]
