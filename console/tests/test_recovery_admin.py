"""A destination's Recover page: the count is shown first, nothing is recorded until the operator confirms it."""

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from conftest import permissions_named
from delivery.actions.recovery import recoveries_advance
from delivery.actions.tests.recovery_data import history_build
from delivery.models import Delivery, DeliveryStatus, Recovery

pytestmark = pytest.mark.django_db

WINDOW = {"states": ["DELIVERED", "DEAD"], "since": "2026-11-24T08:00:00", "until": "2026-11-25T10:00:00"}


@pytest.fixture
def history(settings):
    settings.WEBHOOK_URL = ""
    return history_build()


def recover_url(destination) -> str:
    return reverse("admin:delivery_destination_recover", args=[destination.pk])


def test_the_count_is_shown_first_and_nothing_is_recorded_until_the_operator_confirms(console, history):
    crm, _, _ = history

    counted = console.post(recover_url(crm), {**WINDOW, "_count": "Count"})

    assert counted.status_code == 200
    page = counted.content.decode()
    assert '<strong id="recover-count">6</strong>' in page
    assert 'value="Yes, recover 6 deliveries"' in page
    assert not Recovery.objects.exists()

    confirmed = console.post(recover_url(crm), {**WINDOW, "_confirm": "Yes"})

    assert confirmed.status_code == 302
    assert confirmed["Location"].endswith(
        reverse("admin:delivery_destination_change", args=[crm.pk]) + "#recoveries-group"
    )
    recovery = Recovery.objects.get()
    assert (recovery.total, recovery.requested_by, recovery.states) == (6, "ops-alice", ["DEAD", "DELIVERED"])
    assert not Delivery.objects.filter(status=DeliveryStatus.QUEUED).exists()


def test_the_destinations_page_offers_recover_and_shows_each_recoverys_progress(console, history):
    crm, _, _ = history
    console.post(recover_url(crm), {**WINDOW, "_confirm": "Yes"})
    recoveries_advance(batch_size=4)

    page = console.get(reverse("admin:delivery_destination_change", args=[crm.pk])).content.decode()

    assert 'id="destination-recover"' in page
    assert '<span class="recovery-progress">4 of 6 queued again</span>' in page
    assert '<td class="recovery-status">Running</td>' in page


@pytest.mark.parametrize(
    "values, message",
    [
        ({**WINDOW, "until": "2026-11-24T08:00:00"}, "Must be after since."),
        ({**WINDOW, "states": []}, "This field is required."),
        ({**WINDOW, "since": "Tuesday"}, "Enter a valid date/time."),
    ],
)
def test_bad_values_come_back_on_the_form_naming_the_field(console, history, values, message):
    crm, _, _ = history

    response = console.post(recover_url(crm), {**values, "_count": "Count"})

    assert response.status_code == 200
    assert message in response.content.decode()
    assert 'id="recover-count"' not in response.content.decode()
    assert not Recovery.objects.exists()


def test_an_empty_window_says_nothing_to_recover_and_offers_no_confirmation(console, history):
    crm, _, _ = history

    response = console.post(
        recover_url(crm),
        {**WINDOW, "since": "2026-11-25T10:00:01", "until": "2026-11-25T11:00:00", "_count": "Count"},
    )

    assert 'id="recover-nothing"' in response.content.decode()
    assert "recover-yes" not in response.content.decode()


def test_an_operator_without_change_destination_cannot_recover(client, history):
    crm, _, _ = history
    reader = get_user_model().objects.create_user(username="reader", password="s3cret-pass!", is_staff=True)
    reader.user_permissions.set(permissions_named("delivery.view_destination"))
    client.force_login(reader)

    page = client.get(reverse("admin:delivery_destination_change", args=[crm.pk])).content.decode()
    refused = client.post(recover_url(crm), {**WINDOW, "_confirm": "Yes"})

    assert 'id="recoveries"' in page and 'id="destination-recover"' not in page
    assert refused.status_code == 403
    assert not Recovery.objects.exists()
