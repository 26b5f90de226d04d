"""The operator console's endpoint pages, Pause and Resume, and the dashboard's endpoint lines (Django test client)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from conftest import permissions_named
from console.tests.console_data import completed_event, endpoint, heartbeat, waiting_for
from delivery.credentials.receiver_urls import url_redact
from delivery.destinations.selectors import Backlog, endpoint_backlog
from delivery.models import Delivery, DeliveryStatus, Endpoint, EndpointState
from delivery.tests.pipeline import key_of
from runtime.models import ProcessKind
from users.tests.factories import UserFactory

CHANGELIST = "admin:delivery_endpoint_changelist"
RECEIVER = "https://hooks.example.com/birthdays"
OTHER = "https://other.example.net/hook"

pytestmark = pytest.mark.django_db


def changelist(console, **params):
    response = console.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def cell(html: str, column: str, row: int) -> str:
    """The text of one column's cell in the `row`-th row of the change list."""
    cells = re.findall(rf'<td class="field-{column}[^"]*">(.*?)</td>', html, re.S)
    return re.sub(r"<[^>]+>", " ", cells[row]).strip()


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def change_page(endpoint_row: Endpoint) -> str:
    return reverse("admin:delivery_endpoint_change", args=[endpoint_row.pk])


def press(client, endpoint_row: Endpoint, button: str):
    """POST the change page's Pause or Resume button, following the redirect back."""
    return client.post(reverse(f"admin:delivery_endpoint_{button}", args=[endpoint_row.pk]), follow=True)


@pytest.fixture
def viewer(client, django_user_model):
    """A staff account that may read endpoints but not change them."""
    account = django_user_model.objects.create_user(
        username="ops-viewer", password="unused-Pass-1!", is_staff=True
    )
    account.user_permissions.set(permissions_named("delivery.view_endpoint", "delivery.view_delivery"))
    client.force_login(account)
    return client


# --- the list --------------------------------------------------------------------------------------


def test_list_shows_each_endpoints_state_and_what_waits_on_it_not_its_history(console):
    failing = endpoint(
        RECEIVER,
        state=EndpointState.FAILING,
        last_error="Connection error: Cannot connect to host " + "x" * 200,
    )
    paused = endpoint(OTHER, state=EndpointState.PAUSED, paused_by="ops-carol")
    for status in (DeliveryStatus.QUEUED, DeliveryStatus.QUEUED, DeliveryStatus.SENDING):
        waiting_for(UserFactory(), failing.url, status=status)
    waiting_for(UserFactory(), paused.url)
    delivered = completed_event(UserFactory()).deliveries.get()
    Delivery.objects.filter(pk=delivered.pk).update(endpoint_key=key_of(failing.url))

    html = changelist(console).content.decode()

    # Ordered by URL: hooks.example.com, then other.example.net.
    assert [cell(html, "queued", row) for row in (0, 1)] == ["2", "1"]
    assert [cell(html, "sending", row) for row in (0, 1)] == ["1", "0"]
    assert "Failing" in cell(html, "state_badge", 0) and "Paused" in cell(html, "state_badge", 1)
    assert "12 min ago" in cell(html, "failing_for", 0)
    # in words, the worker's line cut to 80 characters on hover
    assert (
        cell(html, "last_error_short", 0) == "Could not connect to the receiver (refused, reset, DNS or TLS)"
    )
    assert 'title="Connection error: Cannot connect to host xxx' in html and "x" * 39 + '…"' in html
    assert "ops-carol" in cell(html, "paused", 1) and cell(html, "paused", 0) == "—"


def test_list_reads_what_waits_in_one_query_whatever_the_page_holds(console, django_assert_max_num_queries):
    endpoint(RECEIVER)
    changelist(console)
    with django_assert_max_num_queries(12) as baseline:
        changelist(console)
    for number in range(12):
        waiting_for(UserFactory(), endpoint(f"https://r{number}.example.com/hook").url)
    with django_assert_max_num_queries(len(baseline.captured_queries)):
        changelist(console)


def test_filter_by_state(console):
    endpoint(RECEIVER)
    paused = endpoint(OTHER, state=EndpointState.PAUSED)

    response = changelist(console, state__exact=EndpointState.PAUSED)

    assert [row.pk for row in response.context["cl"].result_list] == [paused.pk]


def test_backlog_names_every_url_asked_for_even_with_nothing_waiting():
    completed_event(UserFactory())

    assert endpoint_backlog(keys=[key_of(RECEIVER)]) == {key_of(RECEIVER): Backlog(queued=0, sending=0)}
    assert endpoint_backlog(keys=[]) == {}


# --- the change page: a view, with Pause or Resume --------------------------------------------------


def test_endpoint_page_is_read_only_and_offers_pause(console):
    failing = endpoint(RECEIVER, state=EndpointState.FAILING)
    waiting_for(UserFactory(), failing.url)

    response = console.get(change_page(failing))

    html = response.content.decode()
    assert response.status_code == 200
    assert "View endpoint" in html and 'name="_save"' not in html
    assert "1 queued, 0 in flight" in html and "HTTP 503 Service Unavailable" in html
    assert 'id="endpoint-pause"' in html and 'id="endpoint-resume"' not in html
    assert console.post(change_page(failing), {"state": EndpointState.HEALTHY}).status_code == 403


def test_a_paused_endpoints_page_says_who_paused_it_and_offers_resume(console):
    paused = endpoint(RECEIVER, state=EndpointState.PAUSED, paused_by="ops-carol")

    html = console.get(change_page(paused)).content.decode()

    assert 'id="endpoint-resume"' in html and 'id="endpoint-pause"' not in html
    assert re.search(r"Paused by <strong[^>]*>ops-carol</strong>", html)


def test_endpoints_cannot_be_added_or_deleted(console):
    row = endpoint(RECEIVER)

    assert console.get(reverse("admin:delivery_endpoint_add")).status_code == 403
    assert console.get(reverse("admin:delivery_endpoint_delete", args=[row.pk])).status_code == 403


def test_pause_then_resume_move_the_endpoint_and_log_the_operator(console):
    row = endpoint(RECEIVER)

    paused = press(console, row, "pause")

    row.refresh_from_db()
    assert (row.state, row.paused_by) == (EndpointState.PAUSED, "ops-alice")
    assert paused.redirect_chain == [(change_page(row), 302)]
    assert "Pause: 1 endpoint paused." in messages_of(paused)
    assert 'id="endpoint-resume"' in paused.content.decode()

    resumed = press(console, row, "resume")

    row.refresh_from_db()
    assert (row.state, row.paused_by, row.paused_at) == (EndpointState.HEALTHY, "", None)
    assert "Resume: 1 endpoint resumed." in messages_of(resumed)
    changes = [e.get_change_message() for e in LogEntry.objects.filter(object_id=str(row.pk)).order_by("pk")]
    assert changes == ["Pause by operator ops-alice.", "Resume by operator ops-alice."]


def test_pausing_a_failing_endpoint_holds_it_and_stops_its_probes(console):
    row = endpoint(RECEIVER, state=EndpointState.FAILING)

    press(console, row, "pause")

    row.refresh_from_db()
    assert row.state == EndpointState.PAUSED
    assert (row.failing_since, row.next_probe_at) == (None, None)


def test_a_get_never_pauses(console):
    row = endpoint(RECEIVER)

    response = console.get(reverse("admin:delivery_endpoint_pause", args=[row.pk]))

    assert response.status_code == 405
    row.refresh_from_db()
    assert row.state == EndpointState.HEALTHY


def test_pause_without_the_csrf_token_is_refused(django_user_model):
    row = endpoint(RECEIVER)
    client = Client(enforce_csrf_checks=True)
    client.force_login(
        django_user_model.objects.create_superuser(username="ops-dan", password="unused-Pass-1!")
    )

    response = client.post(reverse("admin:delivery_endpoint_pause", args=[row.pk]))

    assert response.status_code == 403
    row.refresh_from_db()
    assert row.state == EndpointState.HEALTHY


def test_an_operator_without_change_endpoint_sees_no_buttons_and_is_refused(viewer):
    row = endpoint(RECEIVER)

    html = viewer.get(change_page(row)).content.decode()
    response = viewer.post(reverse("admin:delivery_endpoint_pause", args=[row.pk]))

    assert "View endpoint" in html and 'id="endpoint-pause"' not in html
    assert response.status_code == 403
    row.refresh_from_db()
    assert row.state == EndpointState.HEALTHY
    assert not LogEntry.objects.exists()


def test_resuming_a_healthy_endpoint_is_an_error_message_not_a_500(console):
    row = endpoint(RECEIVER)

    response = press(console, row, "resume")

    assert response.status_code == 200
    assert any("Resume refused" in m and "neither paused nor gone" in m for m in messages_of(response))
    row.refresh_from_db()
    assert row.state == EndpointState.HEALTHY
    assert not LogEntry.objects.exists()


def test_pausing_an_unknown_endpoint_goes_back_to_the_list_with_a_message(console):
    response = console.post(reverse("admin:delivery_endpoint_pause", args=[987654]), follow=True)

    assert response.status_code == 200
    assert any("doesn’t exist" in m for m in messages_of(response))


# --- the list's actions --------------------------------------------------------------------------


def act(console, action: str, rows):
    return console.post(
        reverse(CHANGELIST), {"action": action, "_selected_action": [str(r.pk) for r in rows]}, follow=True
    )


def test_pause_action_pauses_the_selection_and_reports_the_ones_already_paused(console):
    healthy = endpoint(RECEIVER)
    paused = endpoint(OTHER, state=EndpointState.PAUSED, paused_by="ops-carol")

    notes = messages_of(act(console, "pause", [healthy, paused]))

    healthy.refresh_from_db()
    paused.refresh_from_db()
    assert (healthy.state, healthy.paused_by) == (EndpointState.PAUSED, "ops-alice")
    assert paused.paused_by == "ops-carol"
    assert any("Pause refused" in m and "already paused (by ops-carol)" in m for m in notes)
    assert "Pause: 1 endpoint paused." in notes


def test_resume_action_resumes_paused_endpoints(console):
    rows = [endpoint(RECEIVER, state=EndpointState.PAUSED), endpoint(OTHER, state=EndpointState.PAUSED)]

    notes = messages_of(act(console, "resume", rows))

    assert set(Endpoint.objects.values_list("state", flat=True)) == {EndpointState.HEALTHY}
    assert "Resume: 2 endpoints resumed." in notes


# --- from a delivery, and on the dashboard --------------------------------------------------------


def test_a_delivery_page_links_to_its_endpoint_and_its_state(console):
    row = endpoint(RECEIVER, state=EndpointState.FAILING)
    delivery = waiting_for(UserFactory(), row.url)

    html = console.get(reverse("admin:delivery_delivery_change", args=[delivery.pk])).content.decode()

    assert f'<a href="{change_page(row)}">{url_redact(RECEIVER)}</a>' in html
    assert RECEIVER not in html
    assert "Failing" in html


def test_dashboard_lists_failing_and_paused_endpoints_with_since_and_by_whom(console):
    endpoint("https://fine.example.org/hook")
    failing = endpoint(RECEIVER, state=EndpointState.FAILING, since=timedelta(minutes=25))
    endpoint(OTHER, state=EndpointState.PAUSED, paused_by="ops-carol", since=timedelta(hours=2, minutes=5))
    waiting_for(UserFactory(), failing.url)
    waiting_for(UserFactory(), failing.url)

    response = console.get(reverse("admin:dashboard"))

    lines = response.context["unhealthy_endpoints"]
    assert [(line.endpoint.url_display, line.for_how_long, line.queued) for line in lines] == [
        (url_redact(RECEIVER), "25 min", 2),
        (url_redact(OTHER), "2 h 05 min", 0),
    ]
    html = response.content.decode()
    assert "paused by ops-carol" in html and "All endpoints healthy" not in html
    assert "fine.example.org" not in html
    assert f'href="{change_page(failing)}"' in html


def test_dashboard_says_when_every_endpoint_is_healthy(console):
    endpoint(RECEIVER)
    heartbeat(kind=ProcessKind.SCHEDULER)
    heartbeat(kind=ProcessKind.WORKER)

    html = console.get(reverse("admin:dashboard")).content.decode()

    assert "Nothing needs attention" in html
    assert 'class="endpoint-' not in html
