"""The operator console's delivery pages and the Resend action (Django test client)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from console.tests.console_data import completed_event, delivery_for, failed_event, past_event
from delivery.models import AttemptOutcome, Delivery, DeliveryStatus
from scheduling.models import EventStatus
from users.tests.factories import UserFactory

CHANGELIST = "admin:delivery_delivery_changelist"

pytestmark = pytest.mark.django_db


def changelist(console, **params):
    response = console.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def listed(response) -> set:
    return {delivery.pk for delivery in response.context["cl"].result_list}


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def sending(user, *, lease_left: timedelta):
    event = past_event(user, status=EventStatus.PROCESSING)
    delivery = delivery_for(event, status=DeliveryStatus.QUEUED)
    Delivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.SENDING,
        attempts=1,
        locked_by="worker-7:311:beef",
        locked_until=timezone.now() + lease_left,
        attempt_started_at=timezone.now(),
    )
    delivery.refresh_from_db()
    return delivery


# --- the list --------------------------------------------------------------------------------------


def test_list_shows_status_attempts_next_attempt_lease_and_last_error(console):
    dead = failed_event(UserFactory(first_name="Grace", last_name="Hopper")).deliveries.get()
    leased = sending(UserFactory(), lease_left=timedelta(seconds=40))

    html = changelist(console).content.decode()

    assert dead.idempotency_key in html and "Grace Hopper" in html
    assert 'class="bs-badge"' in html and "Dead" in html and "Sending" in html
    assert "3 of 3" in html
    assert "HTTP 503 Service Unavailable" in html
    assert leased.locked_by in html


def test_list_queries_do_not_grow_with_rows(console, django_assert_max_num_queries):
    completed_event(UserFactory())
    changelist(console)
    with django_assert_max_num_queries(12) as baseline:
        changelist(console)
    for _ in range(15):
        failed_event(UserFactory())
    with django_assert_max_num_queries(len(baseline.captured_queries)):
        changelist(console)


def test_filter_by_status(console):
    dead = failed_event(UserFactory()).deliveries.get()
    completed_event(UserFactory())

    assert listed(changelist(console, status__exact=DeliveryStatus.DEAD)) == {dead.pk}


def test_filter_by_attempt_outcome(console):
    dead = failed_event(UserFactory()).deliveries.get()
    delivered = completed_event(UserFactory()).deliveries.get()

    assert listed(changelist(console, attempt_outcome=AttemptOutcome.TRANSIENT_FAILURE)) == {dead.pk}
    assert listed(changelist(console, attempt_outcome=AttemptOutcome.DELIVERED)) == {delivered.pk}
    assert listed(changelist(console, attempt_outcome=AttemptOutcome.ABANDONED)) == set()


def test_filter_by_lease_tells_held_from_expired(console):
    held = sending(UserFactory(), lease_left=timedelta(seconds=30))
    expired = sending(UserFactory(), lease_left=-timedelta(seconds=30))

    assert listed(changelist(console, lease="held")) == {held.pk}
    assert listed(changelist(console, lease="expired")) == {expired.pk}
    assert "(expired)" in changelist(console, lease="expired").content.decode()


def test_search_by_idempotency_key_or_event_id(console):
    dead = failed_event(UserFactory()).deliveries.get()
    completed_event(UserFactory())

    assert listed(changelist(console, q=dead.idempotency_key)) == {dead.pk}
    assert listed(changelist(console, q=f" {dead.event_id} ")) == {dead.pk}
    assert listed(changelist(console, q="event-0000000000000000")) == set()


# --- the change page: a view with its attempts -------------------------------------------------------


def test_delivery_page_is_read_only_and_lists_its_attempts(console):
    delivery = failed_event(UserFactory()).deliveries.get()
    url = reverse("admin:delivery_delivery_change", args=[delivery.pk])

    response = console.get(url)

    html = response.content.decode()
    assert response.status_code == 200
    assert "View delivery" in html and 'name="_save"' not in html
    assert html.count("Transient failure") == 3
    assert "503" in html and "180 ms" in html and "upstream timeout" in html
    assert console.post(url, {"status": DeliveryStatus.QUEUED}).status_code == 403


def test_deliveries_cannot_be_added_or_deleted(console):
    delivery = failed_event(UserFactory()).deliveries.get()

    assert console.get(reverse("admin:delivery_delivery_add")).status_code == 403
    assert console.get(reverse("admin:delivery_delivery_delete", args=[delivery.pk])).status_code == 403


# --- Resend -------------------------------------------------------------------------------------------


def resend(console, deliveries):
    return console.post(
        reverse(CHANGELIST),
        {"action": "resend", "_selected_action": [str(d.pk) for d in deliveries], "confirmed": "yes"},
        follow=True,
    )


def test_resend_requeues_a_dead_delivery_and_logs_the_operator(console):
    delivery = failed_event(UserFactory()).deliveries.get()

    response = resend(console, [delivery])

    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.QUEUED
    assert delivery.max_attempts > delivery.attempts
    assert delivery.event.status == EventStatus.PROCESSING
    entry = LogEntry.objects.get(object_id=str(delivery.pk))
    assert entry.user.username == "ops-alice" and "ops-alice" in entry.get_change_message()
    assert any("Resend: 1 delivery queued" in m for m in messages_of(response))


def test_resend_refuses_deliveries_that_are_not_dead_and_resends_the_rest(console):
    dead = failed_event(UserFactory()).deliveries.get()
    delivered = completed_event(UserFactory()).deliveries.get()

    response = resend(console, [dead, delivered])

    notes = messages_of(response)
    assert any("Resend refused" in m and delivered.idempotency_key in m for m in notes)
    delivered.refresh_from_db()
    dead.refresh_from_db()
    assert delivered.status == DeliveryStatus.DELIVERED
    assert dead.status == DeliveryStatus.QUEUED
    assert not LogEntry.objects.filter(object_id=str(delivered.pk)).exists()


def test_resending_twice_keeps_one_delivery_for_the_occurrence(console):
    event = failed_event(UserFactory())

    resend(console, [event.deliveries.get()])
    response = resend(console, [event.deliveries.get()])

    assert Delivery.objects.filter(event=event).count() == 1
    assert any("Resend refused" in m for m in messages_of(response))
