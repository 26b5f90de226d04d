"""Deliveries still waiting on their receiver EVENT_MAX_LATENESS after they were queued are given up."""

from datetime import timedelta

import pytest
from django.utils import timezone

from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, DeliveryStatus
from delivery.tests.pipeline import create_due_users
from delivery.worker.expiry import deliveries_expire_late
from delivery.worker.leases import deliveries_claim
from scheduling.models import EventStatus

pytestmark = pytest.mark.django_db

LATENESS = timedelta(hours=48)


@pytest.fixture
def queued(delivery_settings):
    delivery_settings.EVENT_MAX_LATENESS = LATENESS
    create_due_users(3)
    deliveries_enqueue_due(batch_size=10)
    return list(Delivery.objects.order_by("id"))


def queued_ago(delivery: Delivery, ago: timedelta, **changes) -> None:
    """Make the delivery look queued (and due) `ago` before now."""
    when = timezone.now() - ago
    Delivery.objects.filter(pk=delivery.pk).update(created_at=when, next_attempt_at=when, **changes)


def test_a_delivery_queued_longer_than_the_lateness_ago_is_dead_and_its_event_failed_with_the_reason(queued):
    late = queued[0]
    queued_ago(late, LATENESS + timedelta(minutes=1), last_error="HTTP 503 (Service Unavailable)")

    expired = deliveries_expire_late(now=timezone.now())

    late.refresh_from_db()
    late.event.refresh_from_db()
    assert expired == 1
    assert late.status == DeliveryStatus.DEAD
    assert late.event.status == EventStatus.FAILED
    assert "EVENT_MAX_LATENESS (48 h)" in late.last_error
    assert "last: HTTP 503 (Service Unavailable)" in late.last_error
    assert late.event.failure_reason == late.last_error


def test_a_late_delivery_never_tried_says_so_in_its_reason(queued):
    queued_ago(queued[0], LATENESS + timedelta(minutes=1))

    deliveries_expire_late(now=timezone.now())

    assert Delivery.objects.get(pk=queued[0].pk).last_error.endswith("last: no attempt")


def test_a_delivery_queued_less_than_the_lateness_ago_is_left_queued(queued):
    young = queued[0]
    queued_ago(young, LATENESS - timedelta(minutes=1))

    assert deliveries_expire_late(now=timezone.now()) == 0

    young.refresh_from_db()
    young.event.refresh_from_db()
    assert (young.status, young.last_error, young.event.status) == (
        DeliveryStatus.QUEUED,
        "",
        EventStatus.PROCESSING,
    )


def test_a_delivery_resent_less_than_the_lateness_ago_is_left_queued_however_old(queued):
    resent = queued[0]
    queued_ago(resent, LATENESS + timedelta(hours=5), requeued_at=timezone.now() - timedelta(hours=1))

    assert deliveries_expire_late(now=timezone.now()) == 0
    assert Delivery.objects.get(pk=resent.pk).status == DeliveryStatus.QUEUED


def test_a_delivery_being_sent_is_left_to_its_worker_however_old(queued):
    sending, late, young = queued
    queued_ago(sending, LATENESS + timedelta(hours=2))
    queued_ago(late, LATENESS + timedelta(hours=1))
    queued_ago(young, timedelta(minutes=5))
    claimed = deliveries_claim(worker="w1", limit=1, lease=timedelta(seconds=30))
    assert [c.id for c in claimed] == [sending.id]  # the oldest due one

    expired = deliveries_expire_late(now=timezone.now())

    statuses = dict(Delivery.objects.values_list("id", "status"))
    assert expired == 1
    assert statuses == {
        sending.id: DeliveryStatus.SENDING,
        late.id: DeliveryStatus.DEAD,
        young.id: DeliveryStatus.QUEUED,
    }
    sending.event.refresh_from_db()
    assert sending.event.status == EventStatus.PROCESSING
