"""The failures page: one row per (destination, cause), Acknowledge, and Resend after a confirmation."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from console.tests.console_data import dead_at
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import Delivery, DeliveryStatus, FailureAcknowledgement

pytestmark = pytest.mark.django_db
PAGE = "admin:failures"


def destination(name: str):
    return destination_create(
        settings=DestinationSettings(name=name, url=f"https://{name}.example.org/hook"), operator="ops"
    ).destination


def test_the_page_lists_a_row_per_destination_and_cause_with_counts_and_examples(console):
    crm = destination("crm")
    for minutes in (3, 30, 300):
        dead_at(crm, status_code=400, finished_at=timezone.now() - timedelta(minutes=minutes))
    dead_at(crm, status_code=None, error="Timed out after 10 s")

    html = console.get(reverse(PAGE)).content.decode()

    assert html.count('class="failure-group"') == 2
    row = html.split('data-cause="http_400"')[1].split("</tr>")[0]
    assert "HTTP 400 Bad Request" in row
    assert '<td data-label="Dead" class="num failure-count">3</td>' in row
    assert row.count("admin/delivery/delivery/") == 3  # the latest three, linked
    assert "Resend 3…" in row and "Acknowledge" in row


def test_the_page_narrows_to_one_destination_and_a_window(console):
    crm, chat = destination("crm"), destination("chat")
    dead_at(crm, finished_at=timezone.now() - timedelta(hours=3))
    dead_at(chat)

    only_chat = console.get(reverse(PAGE), {"destination": chat.pk}).content.decode()
    last_hour = console.get(reverse(PAGE), {"window": "1h"}).content.decode()

    assert 'data-destination="chat"' in only_chat and 'data-destination="crm"' not in only_chat
    assert 'data-destination="chat"' in last_hour and 'data-destination="crm"' not in last_hour


def test_acknowledge_takes_the_group_off_the_list_and_changes_no_delivery(console):
    crm = destination("crm")
    delivery = dead_at(crm)

    response = console.post(
        reverse(PAGE),
        {
            "destination": crm.pk,
            "cause": "http_400",
            "action": "acknowledge",
            "through": delivery.updated_at.isoformat(),
        },
        follow=True,
    )

    assert any("Acknowledged the failures of crm" in str(m) for m in get_messages(response.wsgi_request))
    assert 'id="no-failures"' in response.content.decode()
    assert FailureAcknowledgement.objects.get().acknowledged_by == "ops-alice"
    assert Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DEAD


def test_resend_asks_first_saying_how_many_and_sends_nothing_until_confirmed(console):
    crm = destination("crm")
    deliveries = [dead_at(crm) for _ in range(2)]

    asked = console.post(reverse(PAGE), {"destination": crm.pk, "cause": "http_400", "action": "resend"})

    assert asked.status_code == 200
    page = asked.content.decode()
    assert "2 dead deliveries</strong> will be queued again" in page
    assert "crm, HTTP 400 Bad Request" in page
    assert {d.status for d in Delivery.objects.filter(pk__in=[d.pk for d in deliveries])} == {
        DeliveryStatus.DEAD
    }

    console.post(
        reverse(PAGE), {"destination": crm.pk, "cause": "http_400", "action": "resend", "confirmed": "yes"}
    )
    assert {d.status for d in Delivery.objects.filter(pk__in=[d.pk for d in deliveries])} == {
        DeliveryStatus.QUEUED
    }


def test_an_unknown_group_is_refused_with_a_message_and_nothing_changes(console):
    crm = destination("crm")
    delivery = dead_at(crm)

    response = console.post(
        reverse(PAGE),
        {"destination": crm.pk, "cause": "http_4x", "action": "resend", "confirmed": "yes"},
        follow=True,
    )

    assert any("Nothing was done" in str(m) for m in get_messages(response.wsgi_request))
    assert Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.DEAD


def test_an_operator_who_may_only_read_sees_the_groups_but_no_action(client, django_user_model):
    from conftest import permissions_named

    reader = django_user_model.objects.create_user(username="reader", password="x-Pass-123!", is_staff=True)
    reader.user_permissions.set(permissions_named("delivery.view_delivery"))
    client.force_login(reader)
    crm = destination("crm")
    dead_at(crm)

    html = client.get(reverse(PAGE)).content.decode()
    refused = client.post(
        reverse(PAGE), {"destination": crm.pk, "cause": "http_400", "action": "acknowledge"}
    )

    assert 'class="failure-group"' in html and 'value="acknowledge"' not in html
    assert refused.status_code == 403
    assert not FailureAcknowledgement.objects.exists()


def test_each_cause_says_what_fixes_it_a_chat_webhooks_404_that_it_was_deleted(console, api_client):
    slack = destination_create(
        settings=DestinationSettings(
            name="slack", url="https://hooks.slack.com/services/T/B/x", format="slack"
        ),
        operator="ops",
    ).destination
    crm = destination("crm")
    dead_at(slack, status_code=404, error="no_service")
    dead_at(crm, status_code=404, error="Not Found")

    page = console.get(reverse("admin:failures")).content.decode()
    answered = api_client.get("/api/v1/failures/")

    assert (
        "The chat service says the webhook no longer exists: it was deleted, or its channel archived." in page
    )
    assert "Nothing takes greetings at this URL. Check its path" in page
    hints = {group["destination_name"]: group["cause_hint"] for group in answered.json()}
    assert hints["slack"].startswith("The chat service says the webhook no longer exists")
    assert hints["crm"].startswith("Nothing takes greetings at this URL")
    health = {
        row["name"]: row["last_failure_hint"] for row in api_client.get("/api/v1/destinations-health/").json()
    }
    assert health["slack"].startswith("The chat service says the webhook no longer exists")
    destination_page = console.get(
        reverse("admin:delivery_destination_change", args=[slack.pk])
    ).content.decode()
    assert (
        '<div class="failure-hint bs-muted">The chat service says the webhook no longer exists'
        in destination_page
    )
