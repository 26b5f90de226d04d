"""The landing page: the dashboard first, what needs attention at its top, refreshed in place, counted truthfully."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from console import dashboard
from console.tests.console_data import dead_at, delivered_at, heartbeat
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from runtime.models import ProcessKind
from scheduling.models import EventStatus
from scheduling.selectors import event_status_counts
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def destination(name: str):
    return destination_create(
        settings=DestinationSettings(name=name, url=f"https://{name}.example.org/hook"), operator="ops"
    ).destination


def running_processes() -> None:
    heartbeat(kind=ProcessKind.SCHEDULER)
    heartbeat(kind=ProcessKind.WORKER)


def test_the_landing_page_after_login_is_the_dashboard(client, django_user_model):
    # given an operator who logs in through the form
    django_user_model.objects.create_superuser(username="ops-ann", password="Unused-pass-123!")

    # when they log in (the form's hidden "next" is the console's home), then they land on the dashboard
    login = client.get(reverse("admin:login")).content.decode()
    assert f'name="next" value="{reverse("admin:index")}"' in login
    response = client.post(
        reverse("admin:login"),
        {"username": "ops-ann", "password": "Unused-pass-123!", "next": reverse("admin:index")},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == reverse("admin:index")
    assert response.templates[0].name == "admin/dashboard.html"
    assert 'id="attention"' in response.content.decode()


def test_whoever_may_not_read_the_dashboard_gets_the_plain_index(client, django_user_model):
    clerk = django_user_model.objects.create_user(username="clerk", password="x-Pass-123!", is_staff=True)
    client.force_login(clerk)

    response = client.get(reverse("admin:index"))

    assert response.status_code == 200
    assert response.templates[0].name == "admin/index.html"


def test_a_destination_whose_deliveries_all_end_dead_comes_first_among_what_needs_attention(console):
    # given crm-broken, whose 7 of 7 deliveries ended DEAD with HTTP 400 (its endpoint healthy), and a fine one
    running_processes()
    broken, fine = destination("crm-broken"), destination("crm-fine")
    for minutes in range(7):
        dead_at(broken, status_code=400, finished_at=timezone.now() - timedelta(minutes=5 + minutes))
    delivered_at(fine)

    # when the dashboard is shown
    html = console.get(reverse("admin:dashboard")).content.decode()

    # then the top card names it as failing with its dead count and its last error in words,
    # and the destinations table shows it first, needing attention, never "Healthy"
    attention = html.split('id="attention"')[1].split("</div>")[0]
    assert "Destination crm-broken: Failing: deliveries end dead. 7 dead in 24 h" in attention
    assert "last failure: HTTP 400 Bad Request" in attention
    assert "never delivered" in attention
    assert "crm-fine" not in attention
    table = html.split('id="destination-health"')[1]
    assert table.index('data-destination="crm-broken"') < table.index('data-destination="crm-fine"')
    broken_row = table.split('data-destination="crm-broken"')[1].split("</tr>")[0]
    assert 'data-attention="yes"' in html.split('data-destination="crm-broken"')[0][-200:] + broken_row
    assert "Healthy" not in broken_row


def test_nothing_needs_attention_when_destinations_deliver_and_processes_run(console):
    running_processes()
    delivered_at(destination("crm"))

    html = console.get(reverse("admin:dashboard")).content.decode()

    assert 'id="nothing-needs-attention"' in html


def test_a_stuck_backlog_and_a_missing_worker_need_attention(console):
    heartbeat(kind=ProcessKind.SCHEDULER)
    user = UserFactory()
    user.events.filter(status=EventStatus.PENDING).update(
        target_timestamp_utc=timezone.now() - timedelta(minutes=30)
    )

    html = console.get(reverse("admin:dashboard")).content.decode()

    attention = html.split('id="attention"')[1].split("</div>")[0]
    assert 'data-key="backlog"' in attention and "1 due events not claimed" in attention
    assert 'data-key="no-worker"' in attention


def test_the_page_fetches_its_live_part_alone_to_refresh_without_a_reload(console):
    running_processes()

    page = console.get(reverse("admin:dashboard")).content.decode()
    fragment = console.get(reverse("admin:dashboard"), {"fragment": "1"})

    assert 'data-refresh-every="30"' in page and "?fragment=1" in page
    assert fragment.status_code == 200
    body = fragment.content.decode()
    assert 'id="attention"' in body and 'id="event-status"' in body
    assert "<html" not in body and "<script" not in body


def test_the_figures_are_computed_once_per_interval_for_every_operator(
    console, client, django_user_model, monkeypatch
):
    # given the figures shared for FIGURES_FOR seconds (the suite's default is to compute them every time)
    monkeypatch.setattr(dashboard, "FIGURES_FOR", 10)
    running_processes()
    console.get(reverse("admin:dashboard"))
    other = django_user_model.objects.create_superuser(username="ops-bob", password="unused-Pass-2!")
    client.force_login(other)

    # when another operator's page refreshes within the interval
    with CaptureQueriesContext(connection) as queries:
        response = client.get(reverse("admin:dashboard"), {"fragment": "1"})

    # then it reads the session, the account and the shared figures: nothing is counted again
    assert response.status_code == 200
    assert len(queries) <= 3, [q["sql"][:80] for q in queries]


def test_status_counts_are_exact_when_small_and_labelled_estimates_beyond_the_bound():
    for _ in range(3):
        UserFactory()

    exact = event_status_counts()
    bounded = event_status_counts(exact_up_to=2)

    assert (exact[EventStatus.PENDING].count, exact[EventStatus.PENDING].exact) == (3, True)
    assert exact[EventStatus.COMPLETED].count == 0 and exact[EventStatus.COMPLETED].exact
    # past the bound: PostgreSQL's estimate, labelled so, and never below the bound (an estimate from
    # statistics older than these rows may be anything, 0 included)
    assert not bounded[EventStatus.PENDING].exact
    assert bounded[EventStatus.PENDING].count >= 3
