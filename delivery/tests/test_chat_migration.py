"""Migration 0012: what was queued for a `teams` destination as a MessageCard goes out as the Adaptive Card."""

import importlib

import pytest
from django.db import connection

from delivery.destinations.tests.test_destinations import due_user, new_destination
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryStatus

pytestmark = pytest.mark.django_db

migration = importlib.import_module("delivery.migrations.0012_chat_destination_kinds")
MESSAGE = "Hey, Ada Lovelace it's your birthday"
CARD = {
    "@type": "MessageCard",
    "@context": "https://schema.org/extensions",
    "summary": MESSAGE,
    "text": MESSAGE,
}


def queue_for(*destinations):
    due_user()
    Scheduler(once=True).run()


def test_queued_message_cards_of_teams_destinations_become_adaptive_cards_with_the_same_text(settings):
    # given a teams destination and a standard one with deliveries queued, the teams ones'
    # bodies MessageCards as the old format made them
    settings.WEBHOOK_URL = ""
    teams = new_destination("hr", format="teams")
    new_destination("crm")
    queue_for(teams)
    Delivery.objects.filter(destination=teams).update(payload=CARD)
    standard_before = {d.pk: d.payload for d in Delivery.objects.exclude(destination=teams)}

    # when the migration's data step runs
    with connection.cursor() as cursor:
        cursor.execute(migration.QUEUED_MESSAGE_CARDS_TO_ADAPTIVE)

    # then each teams delivery carries the Adaptive Card with the same text; the others are untouched
    payloads = [d.payload for d in Delivery.objects.filter(destination=teams)]
    assert payloads
    for payload in payloads:
        attachment = payload["attachments"][0]
        assert payload["type"] == "message"
        assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert attachment["content"]["type"] == "AdaptiveCard"
        assert attachment["content"]["body"][0]["inlines"][0] == {"type": "TextRun", "text": MESSAGE}
    assert {d.pk: d.payload for d in Delivery.objects.exclude(destination=teams)} == standard_before


def test_a_teams_delivery_that_ended_keeps_the_body_it_was_sent_with(settings):
    settings.WEBHOOK_URL = ""
    teams = new_destination("hr", format="teams")
    queue_for(teams)
    Delivery.objects.filter(destination=teams).update(payload=CARD, status=DeliveryStatus.DEAD)

    with connection.cursor() as cursor:
        cursor.execute(migration.QUEUED_MESSAGE_CARDS_TO_ADAPTIVE)

    assert [d.payload for d in Delivery.objects.filter(destination=teams)] == [CARD, CARD]
