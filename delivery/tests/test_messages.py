"""Operators' message templates on the scheduler's claim: a change applies to events claimed after
it, never to a message already queued."""

from datetime import date, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from freezegun import freeze_time

from delivery.actions.resend import event_resend
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery
from delivery.tests.pipeline import create_due_users, make_due
from scheduling.exceptions import InvalidStateTransition
from scheduling.models import EventStatus, EventType, MessageTemplate
from scheduling.services.messages import message_template_save
from users.services import user_create, user_update

DEFAULT = "Hey, {} it's your birthday"

# Claims queue deliveries only for a destination: the default one, seeded from WEBHOOK_URL.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("default_destination")]


def new_user(first_name: str, last_name: str, **overrides):
    fields = {"date_of_birth": date(1990, 3, 8), "timezone": "Europe/London", **overrides}
    return user_create(first_name=first_name, last_name=last_name, **fields)


def save_template(body: str) -> None:
    template = MessageTemplate.objects.get(event_type=EventType.BIRTHDAY)
    template.body = body
    message_template_save(template=template, operator="ops-alice")


def queued_message(user) -> str:
    return Delivery.objects.get(event__user=user).payload["message"]


def test_a_changed_template_applies_to_events_claimed_afterwards_not_to_deliveries_already_queued(
    delivery_settings, sink
):
    ada = new_user("Ada", "Lovelace")
    make_due([ada.events.get()])
    deliveries_enqueue_due()
    grace = new_user("Grace", "Hopper")
    make_due([grace.events.get()])

    save_template("{first_name} {last_name}, happy birthday from all of us!")
    deliveries_enqueue_due()
    call_command("run_worker", once=True)

    assert queued_message(ada) == DEFAULT.format("Ada Lovelace")
    assert queued_message(grace) == "Grace Hopper, happy birthday from all of us!"
    assert {received.body["message"] for received in sink.received} == {
        DEFAULT.format("Ada Lovelace"),
        "Grace Hopper, happy birthday from all of us!",
    }


def test_the_default_applies_where_no_operator_template_exists():
    MessageTemplate.objects.all().delete()
    ada = new_user("Ada", "Lovelace")
    make_due([ada.events.get()])

    deliveries_enqueue_due()

    assert queued_message(ada) == DEFAULT.format("Ada Lovelace")


def test_a_claim_batch_reads_the_templates_once_however_many_events_it_claims():
    create_due_users(20)
    table = MessageTemplate._meta.db_table

    with CaptureQueriesContext(connection) as queries:
        result = deliveries_enqueue_due(batch_size=20)

    assert result.queued == 20
    assert sum(table in query["sql"] for query in queries.captured_queries) == 1


def test_age_on_a_feb_29_birthday_in_a_common_and_in_a_leap_year():
    save_template("{first_name} turns {age}")
    with freeze_time("2027-01-10T00:00:00Z"):
        user = new_user("Leap", "Day", date_of_birth=date(2000, 2, 29))
    common_year = user.events.get()
    assert common_year.occurrence_date == date(2027, 2, 28)

    deliveries_enqueue_due(now=common_year.target_timestamp_utc)
    leap_year = user.events.get(status=EventStatus.PENDING)
    assert leap_year.occurrence_date == date(2028, 2, 29)
    deliveries_enqueue_due(now=leap_year.target_timestamp_utc)

    sent = Delivery.objects.filter(event__user=user).order_by("event__occurrence_date")
    assert [delivery.payload["message"] for delivery in sent] == ["Leap turns 27", "Leap turns 28"]


def test_an_operators_resend_renders_with_the_template_saved_since():
    ada = new_user("Ada", "Lovelace")
    event = ada.events.get()
    # Claimed three days late: FAILED without a delivery.
    make_due([event], ago=timedelta(days=3))
    deliveries_enqueue_due()
    event.refresh_from_db()
    assert event.status == EventStatus.FAILED

    save_template("Belated wishes, {first_name}!")
    event_resend(event=event, operator="ops-alice")

    assert queued_message(ada) == "Belated wishes, Ada!"


def test_resending_an_anniversary_whose_date_was_removed_is_refused_and_changes_nothing():
    # given a recipient whose failed anniversary was followed by their date being removed
    user = new_user("Ada", "Lovelace", anniversary_date=date(2015, 6, 1))
    anniversary = user.events.get(event_type=EventType.ANNIVERSARY, status=EventStatus.PENDING)
    type(anniversary).objects.filter(pk=anniversary.pk).update(
        status=EventStatus.FAILED, failure_reason="dead"
    )
    user_update(user=user, data={"anniversary_date": None})

    # when an operator resends it, then it is refused with the reason, and nothing moves
    with pytest.raises(InvalidStateTransition, match="no longer has"):
        event_resend(event=anniversary, operator="ops-alice")
    anniversary.refresh_from_db()
    assert anniversary.status == EventStatus.FAILED
    assert not Delivery.objects.filter(event_id=anniversary.id).exists()
