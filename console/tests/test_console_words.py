"""Labels that mean what they say, pages with nothing to save, and pauses that ask first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from console import widgets
from console.tests.console_data import dead_at
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.rules.attempt_words import AttemptCount
from scheduling.models import Event, EventStatus, EventType, EventTypePause
from users.services import user_update
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_add_destination_form_shows_no_health_for_what_does_not_exist(console):
    html = console.get(reverse("admin:delivery_destination_add")).content.decode()

    assert "Healthy" not in html
    assert 'id="destination-condition"' not in html


def test_a_destinations_page_says_failing_with_its_figures_when_its_deliveries_end_dead(console):
    crm = destination_create(
        settings=DestinationSettings(name="crm", url="https://crm.example.org/hook"), operator="ops"
    ).destination
    for _ in range(2):
        dead_at(crm, status_code=404, error="Not Found")

    html = console.get(reverse("admin:delivery_destination_change", args=[crm.pk])).content.decode()

    condition = html.split('id="destination-condition"')[1].split("</fieldset>")[0]
    assert "Failing: deliveries end dead" in condition
    assert "HTTP 404 Not Found" in condition
    assert "Last delivered: never" in condition
    assert f"{reverse('admin:failures')}?destination={crm.pk}" in condition


def test_an_events_page_has_no_save_button_whatever_its_status(console):
    event = UserFactory().events.get()
    Event.objects.filter(pk=event.pk).update(status=EventStatus.PROCESSING)

    html = console.get(reverse("admin:scheduling_event_change", args=[event.pk])).content.decode()

    assert 'name="_save"' not in html and 'name="_continue"' not in html


def test_greetings_that_go_out_are_not_called_sent(console):
    user = UserFactory()
    paused = UserFactory()
    user_update(user=paused, data={"paused": True}, by="ops")

    html = console.get(reverse("admin:users_user_changelist")).content.decode()

    assert ">Going out<" in html and ">Sent<" not in html
    assert "Paused by ops" in html
    assert user.full_name in html


def test_pausing_an_event_type_for_everyone_asks_first_with_what_is_due_and_changes_nothing(console):
    row = EventTypePause.objects.get(event_type=EventType.BIRTHDAY)
    user = UserFactory()
    Event.objects.filter(user=user).update(target_timestamp_utc=timezone.now() + timedelta(hours=2))

    response = console.post(
        reverse("admin:scheduling_eventtypepause_changelist"),
        {"action": "pause", "_selected_action": [row.pk]},
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "failed unsent" in page
    assert "Birthday: 1 occurrences are due in the next 24 hours" in page
    row.refresh_from_db()
    assert not row.paused


@pytest.mark.parametrize(
    ("made", "not_counted", "allowed", "text"),
    [
        (1, 0, 8, "1 of 8"),
        (3, 0, 3, "3 of 3"),
        (9, 0, 16, 'Raised by a resend: each allows 8 more (DELIVERY_MAX_ATTEMPTS)">9 of 16'),
        # A 404 held for an operator six times: the budget stays 8, however many were not counted.
        (7, 6, 14, "1 of 8, and 6 not counted (throttled, or the receiver gone or down)"),
    ],
)
def test_attempts_read_n_of_max_with_a_word_for_those_not_counted(settings, made, not_counted, allowed, text):
    settings.DELIVERY_MAX_ATTEMPTS = 8

    shown = str(widgets.attempts(AttemptCount(made=made, not_counted=not_counted, max_attempts=allowed)))

    assert text in shown


def test_a_moment_is_written_one_way_with_the_iso_instant_on_hover():
    moment = datetime(2027, 3, 14, 13, 5, 9, 123456, tzinfo=UTC)

    html = str(widgets.when(moment))

    assert ">2027-03-14 13:05 UTC</time>" in html
    assert (
        'datetime="2027-03-14T13:05:09.123456+00:00"' in html
        and 'title="2027-03-14T13:05:09.123456+00:00"' in html
    )
    assert widgets.when(None) == "—"
