"""Failures that say what to do, at a real local receiver: a redirect's Location, a dead delivery's page, a 429
not counted."""

from datetime import date

import pytest
from django.urls import reverse

from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryStatus
from delivery.tests.pipeline import shown_attempts
from delivery.tests.test_pipeline import deliver_until_settled
from delivery.worker.loop import Worker
from devtools.sink import Reply
from users.services import user_create

pytestmark = pytest.mark.django_db


def _due_event():
    from delivery.tests.pipeline import make_due

    user = user_create(first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 3, 8), timezone="UTC")
    event = user.events.get()
    make_due([event])
    return event


def test_a_redirect_is_dead_at_once_shows_its_location_and_says_redirects_are_never_followed(
    delivery_settings, sink, console
):
    event = _due_event()
    sink.script(
        event.idempotency_key, Reply(status=301, headers={"Location": "https://moved.example.org/hook?t=1"})
    )

    Scheduler(once=True).run()
    Worker(once=True).run()

    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD
    assert delivery.last_error == (
        "Permanent failure: HTTP 301 (Moved Permanently): Location https://moved.example.org/…"
    )
    [attempt] = delivery.attempt_log.all()
    assert (attempt.counted, attempt.delivery_status_after) == (True, DeliveryStatus.DEAD)
    page = console.get(reverse("admin:delivery_delivery_change", args=[delivery.pk])).content.decode()
    assert "Redirects are never followed" in page
    assert "None: it is dead (Resend queues it again)" in page
    assert "Refused: not tried again" in page
    assert "1 of 8" in page
    assert "t=1" not in page  # the Location's path and query, which may hold a token, are not shown


def test_a_429_is_an_attempt_not_counted_and_each_attempt_says_what_followed_it(
    delivery_settings, sink, console
):
    event = _due_event()
    sink.script(event.idempotency_key, Reply(status=429), Reply(status=200))

    Scheduler(once=True).run()
    deliver_until_settled()

    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DELIVERED
    assert shown_attempts(delivery, "counted", "delivery_status_after") == [
        (False, DeliveryStatus.QUEUED),
        (True, DeliveryStatus.DELIVERED),
    ]
    page = console.get(reverse("admin:delivery_delivery_change", args=[delivery.pk])).content.decode()
    assert "Throttled (429): not counted; tried again at the receiver&#x27;s pace" in page
    assert "1 of 8, and 1 not counted" in page
    assert "None: it was delivered" in page
    listed = console.get(reverse("admin:delivery_delivery_changelist")).content.decode()
    assert "1 of 8, and 1 not counted" in listed
