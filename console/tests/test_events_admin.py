"""The operator console's event pages, dashboard, actions and access rules (Django test client)."""

from __future__ import annotations

import importlib
from datetime import date, timedelta

import pytest
from django.conf import settings
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.messages import get_messages
from django.test import override_settings
from django.urls import clear_url_caches, reverse
from django.utils import timezone

from console.tests.console_data import completed_event, failed_event, heartbeat
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, DeliveryStatus
from runtime.models import ProcessKind
from scheduling.models import Event, EventStatus, EventZoneData
from scheduling.zonedata import zone_data_version
from users.tests.factories import UserFactory

CHANGELIST = "admin:scheduling_event_changelist"


# Claims queue deliveries only for a destination: the default one, seeded from WEBHOOK_URL.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("default_destination")]


def pending_of(user) -> Event:
    return user.events.get(status=EventStatus.PENDING)


def make_overdue(event: Event, *, by: timedelta) -> Event:
    Event.objects.filter(pk=event.pk).update(target_timestamp_utc=timezone.now() - by)
    event.refresh_from_db()
    return event


def changelist(console, **params):
    response = console.get(reverse(CHANGELIST), params)
    assert response.status_code == 200
    return response


def listed_ids(response) -> set:
    return {event.pk for event in response.context["cl"].result_list}


def messages_of(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


# --- the list ----------------------------------------------------------------------------


def test_event_list_shows_recipient_times_badge_retries_and_lateness(console):
    user = UserFactory(first_name="Ada", last_name="Lovelace", timezone="Asia/Kathmandu")
    make_overdue(pending_of(user), by=timedelta(hours=2, minutes=5))

    response = changelist(console)

    html = response.content.decode()
    assert "Ada Lovelace" in html
    assert "+05:45" in html and "Asia/Kathmandu" in html  # the local time keeps its offset and zone
    assert 'class="bs-badge"' in html and "Pending" in html
    assert "2 h 05 min" in html  # how late the overdue event is


def test_event_list_queries_do_not_grow_with_the_number_of_rows(console, django_assert_max_num_queries):
    for _ in range(3):
        completed_event(UserFactory())
    changelist(console)  # warm the session and content types
    with django_assert_max_num_queries(12) as few:
        changelist(console)
    for _ in range(20):
        failed_event(UserFactory())
    with django_assert_max_num_queries(len(few.captured_queries)):
        changelist(console)


def test_local_time_shows_wall_time_and_offset_even_with_microseconds(console):
    event = pending_of(UserFactory(timezone="America/Los_Angeles"))
    Event.objects.filter(pk=event.pk).update(target_timestamp_local="2026-11-22T15:12:09.589176-08:00")

    html = changelist(console).content.decode()

    assert "2026-11-22 15:12" in html and "-08:00" in html and "589176" not in html


def test_filter_by_status_lists_only_that_status(console):
    done = completed_event(UserFactory())
    failed = failed_event(UserFactory())

    response = changelist(console, status__exact=EventStatus.FAILED)

    assert listed_ids(response) == {failed.pk}
    assert done.pk not in listed_ids(response)


def test_filter_by_type_lists_birthdays(console):
    user = UserFactory()

    response = changelist(console, event_type__exact="BIRTHDAY")

    assert listed_ids(response) == {pending_of(user).pk}


def test_filter_by_type_tells_anniversaries_from_birthdays(console):
    user = UserFactory(anniversary_date=date(2015, 6, 20))
    UserFactory()
    anniversary = user.events.get(event_type="ANNIVERSARY")

    response = changelist(console, event_type__exact="ANNIVERSARY")

    assert listed_ids(response) == {anniversary.pk}
    assert "Wedding anniversary" in response.content.decode()


def test_overdue_filter_separates_past_due_pending_events_from_upcoming_ones(console):
    late = make_overdue(pending_of(UserFactory()), by=timedelta(minutes=30))
    upcoming = pending_of(UserFactory())
    failed = failed_event(UserFactory())

    not_due = listed_ids(changelist(console, overdue="no"))

    assert listed_ids(changelist(console, overdue="yes")) == {late.pk}
    assert upcoming.pk in not_due and pending_of(failed.user).pk in not_due
    assert late.pk not in not_due and failed.pk not in not_due


def test_the_target_time_filter_lists_a_window_around_now_whatever_the_status(console):
    # It stands where the date hierarchy stood, which listed the years present by reading every event.
    late = make_overdue(pending_of(UserFactory()), by=timedelta(hours=3))
    sent = completed_event(UserFactory())
    Event.objects.filter(pk=sent.pk).update(target_timestamp_utc=timezone.now() - timedelta(hours=5))
    last_year = completed_event(UserFactory())
    upcoming = pending_of(UserFactory())
    Event.objects.filter(pk=upcoming.pk).update(target_timestamp_utc=timezone.now() + timedelta(hours=2))

    # Only these four are looked at: the factory's other events fall on random
    # birthdays, some of which may be within a day of now.
    ours = {late.pk, sent.pk, last_year.pk, upcoming.pk}
    past_day = listed_ids(changelist(console, target="past_24h")) & ours
    next_day = listed_ids(changelist(console, target="next_24h")) & ours

    assert past_day == {late.pk, sent.pk}
    assert next_day == {upcoming.pk}


@pytest.mark.parametrize("term", ["Hopper", "Grace Hopper", "grace"])
def test_search_finds_events_by_recipient_name(console, term):
    grace = UserFactory(first_name="Grace", last_name="Hopper")
    UserFactory(first_name="Alan", last_name="Turing")

    assert listed_ids(changelist(console, q=term)) == {pending_of(grace).pk}


def test_search_finds_events_by_their_recipients_external_id_or_the_start_of_a_name(console):
    grace = UserFactory(first_name="Grace", last_name="Hopper", external_id="crm-7")
    UserFactory(first_name="Peggy", last_name="Ogrady")

    assert listed_ids(changelist(console, q="crm-7")) == {pending_of(grace).pk}
    assert listed_ids(changelist(console, q="gr")) == {pending_of(grace).pk}


def test_search_finds_an_event_by_its_id_key_or_recipient_id(console):
    user = UserFactory()
    UserFactory()
    event = pending_of(user)

    assert listed_ids(changelist(console, q=str(event.pk))) == {event.pk}
    assert listed_ids(changelist(console, q=event.idempotency_key)) == {event.pk}
    assert listed_ids(changelist(console, q=f"  {user.pk} ")) == {event.pk}


def test_a_name_search_lists_the_found_recipients_events_newest_first_in_any_status(console):
    grace, ada = UserFactory(first_name="Grace", last_name="Hopper"), UserFactory(first_name="Ada")
    events = [completed_event(grace, years_ago=2), completed_event(grace, years_ago=1), pending_of(grace)]

    listed = changelist(console, q="hopper").context["cl"].result_list
    completed = changelist(console, q="Hopper", status__exact="COMPLETED").context["cl"].result_list

    assert [e.pk for e in listed] == sorted((e.pk for e in events), reverse=True)
    assert [e.pk for e in completed] == [events[1].pk, events[0].pk]  # latest send time first
    assert pending_of(ada).pk not in {e.pk for e in listed}


def test_a_name_most_recipients_share_lists_the_events_of_some_and_says_so(console, monkeypatch):
    monkeypatch.setattr("console.admin.events.SEARCH_RECIPIENTS_BOUND", 2)
    smiths = UserFactory.create_batch(3, last_name="Smith")

    response = changelist(console, q="Smith")

    assert len(listed_ids(response)) == 2
    assert listed_ids(response) <= {pending_of(user).pk for user in smiths}
    assert messages_of(response) == [
        "More than 2 recipients match “Smith”: these are the events of 2 of them. Type more of the name to find the others."
    ]
    assert messages_of(changelist(console, q="Smith", status__exact="PENDING")) != []
    monkeypatch.setattr("console.admin.events.SEARCH_RECIPIENTS_BOUND", 3)
    assert messages_of(changelist(console, q="Smith")) == []


# --- the change form: a view -----------------------------------------------------------


def test_finished_events_open_as_view_only_and_refuse_a_post(console):
    event = completed_event(UserFactory())
    url = reverse("admin:scheduling_event_change", args=[event.pk])

    response = console.get(url)

    assert response.status_code == 200
    assert "View event" in response.content.decode()
    assert 'name="_save"' not in response.content.decode()
    assert console.post(url, {"status": EventStatus.PENDING}).status_code == 403
    event.refresh_from_db()
    assert event.status == EventStatus.COMPLETED


def test_a_pending_events_form_has_no_editable_field_and_a_post_changes_nothing(console):
    event = pending_of(UserFactory())
    url = reverse("admin:scheduling_event_change", args=[event.pk])

    response = console.get(url)
    console.post(url, {"status": EventStatus.FAILED, "retry_count": 9, "_save": "Save"})

    assert response.status_code == 200
    assert list(response.context["adminform"].form.fields) == []
    event.refresh_from_db()
    assert (event.status, event.version) == (EventStatus.PENDING, 1)


def test_events_cannot_be_added_or_deleted_from_the_console(console):
    event = failed_event(UserFactory())

    assert console.get(reverse("admin:scheduling_event_add")).status_code == 403
    assert console.get(reverse("admin:scheduling_event_delete", args=[event.pk])).status_code == 403
    actions = changelist(console).context["action_form"].fields["action"].choices
    assert "delete_selected" not in [name for name, _ in actions]


def test_the_event_form_links_to_its_delivery(console):
    event = failed_event(UserFactory())

    response = console.get(reverse("admin:scheduling_event_change", args=[event.pk]))

    assert (
        reverse("admin:delivery_delivery_change", args=[event.deliveries.get().pk])
        in response.content.decode()
    )


# --- actions -------------------------------------------------------------------------------


def run_action(console, action: str, events, *, follow: bool = True):
    return console.post(
        reverse(CHANGELIST),
        {"action": action, "_selected_action": [str(e.pk) for e in events], "confirmed": "yes"},
        follow=follow,
    )


def test_resend_requeues_a_failed_events_delivery_and_logs_the_operator(console):
    event = failed_event(UserFactory())

    response = run_action(console, "resend", [event])

    event.refresh_from_db()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.QUEUED
    assert event.status == EventStatus.PROCESSING
    entry = LogEntry.objects.get(object_id=str(event.pk))
    assert entry.action_flag == CHANGE
    assert entry.user.username == "ops-alice"
    assert "ops-alice" in entry.get_change_message()
    assert any("Resend: 1 event queued" in m for m in messages_of(response))


def test_resend_of_an_event_that_never_had_a_delivery_queues_exactly_one(console):
    event = failed_event(UserFactory(), with_delivery=False)

    run_action(console, "resend", [event])

    assert Delivery.objects.filter(event=event).count() == 1


def test_resend_refuses_events_not_failed_with_a_message_each_and_still_resends_the_rest(console):
    failed = failed_event(UserFactory())
    done = completed_event(UserFactory())
    pending = pending_of(UserFactory())

    response = run_action(console, "resend", [failed, done, pending])

    notes = messages_of(response)
    assert sum("Resend refused" in m for m in notes) == 2
    assert any(str(done) in m and "Resend refused" in m for m in notes)
    assert any(str(pending) in m and "Resend refused" in m for m in notes)
    assert Delivery.objects.get(event=failed).status == DeliveryStatus.QUEUED
    assert not Delivery.objects.filter(event=pending).exists()
    done.refresh_from_db()
    assert done.status == EventStatus.COMPLETED
    assert LogEntry.objects.filter(object_id__in=[str(done.pk), str(pending.pk)]).count() == 0


def test_resending_twice_never_creates_a_second_delivery(console):
    event = failed_event(UserFactory())

    run_action(console, "resend", [event])
    response = run_action(console, "resend", [event])

    assert Delivery.objects.filter(event=event).count() == 1
    assert any("Resend refused" in m for m in messages_of(response))
    assert LogEntry.objects.filter(object_id=str(event.pk)).count() == 1


def local_day(*, days: int = 0) -> tuple[str, date]:
    """A zone where it is not yet 22:00, and its date `days` from today there (the session cannot be frozen)."""
    from datetime import time as clock
    from zoneinfo import ZoneInfo

    for zone in ("Europe/London", "Asia/Tokyo", "America/Los_Angeles"):
        local = timezone.now().astimezone(ZoneInfo(zone))
        if local.time() < clock(22):
            return zone, local.date() + timedelta(days=days)
    raise AssertionError("one of three zones eight hours apart is before 22:00")


def born_on(*, days: int = 0) -> Event:
    """The PENDING birthday of a recipient born `days` after today, sent at 23:30 in their zone."""
    from datetime import time as clock

    zone, day = local_day(days=days)
    # 1992: a leap year, so today may be Feb 29 too.
    user = UserFactory(timezone=zone, date_of_birth=day.replace(year=1992), send_time=clock(23, 30))
    return pending_of(user)


def test_deliver_now_asks_first_saying_what_happens_and_changes_nothing_until_confirmed(console):
    # given today's birthday and next year's (a recipient born tomorrow)
    today = born_on(days=0)
    later = born_on(days=1)
    before = list(Event.objects.order_by("pk").values())

    # when an operator picks the action for both
    response = console.post(
        reverse(CHANGELIST), {"action": "deliver_now", "_selected_action": [str(today.pk), str(later.pk)]}
    )

    # then a page says what will happen and to how many, names the one it will refuse and why,
    # and nothing has changed
    assert response.status_code == 200
    page = response.content.decode()
    assert "sent now instead of at its send time" in page
    assert "1 event</strong> will be affected" in page
    assert "not of today" in page
    assert list(Event.objects.order_by("pk").values()) == before


def test_deliver_now_confirmed_sends_todays_occurrence_only_and_the_scheduler_sends_it(console):
    # given today's birthday, due at 09:00 London time, and a birthday tomorrow
    event = born_on(days=0)
    later = born_on(days=1)
    later_before = Event.objects.values().get(pk=later.pk)

    # when an operator confirms "deliver now" for both
    response = run_action(console, "deliver_now", [event, later])

    # then today's is due now, the other is refused untouched, and the scheduler queues today's
    event.refresh_from_db()
    assert event.status == EventStatus.PENDING
    assert event.target_timestamp_utc <= timezone.now()
    assert any("Deliver now: 1 event due now" in m for m in messages_of(response))
    assert any("Deliver now refused" in m and "not of today" in m for m in messages_of(response))
    assert Event.objects.values().get(pk=later.pk) == later_before
    assert "ops-alice" in LogEntry.objects.get(object_id=str(event.pk)).get_change_message()
    assert deliveries_enqueue_due().queued == 1
    assert Delivery.objects.get(event=event).status == DeliveryStatus.QUEUED


def test_deliver_now_refuses_events_that_are_not_pending(console):
    failed = failed_event(UserFactory())
    pending = born_on(days=0)

    response = run_action(console, "deliver_now", [failed, pending])

    assert any(str(failed) in m and "Deliver now refused" in m for m in messages_of(response))
    assert Delivery.objects.get(event=failed).status == DeliveryStatus.DEAD  # untouched
    pending.refresh_from_db()
    assert pending.target_timestamp_utc <= timezone.now()  # the valid row went through


def test_resend_asks_first_and_resends_nothing_until_confirmed(console):
    event = failed_event(UserFactory())

    response = console.post(reverse(CHANGELIST), {"action": "resend", "_selected_action": [str(event.pk)]})

    assert response.status_code == 200
    assert "queued again" in response.content.decode()
    assert Delivery.objects.get(event=event).status == DeliveryStatus.DEAD


def test_deliver_now_after_the_scheduler_claimed_it_never_creates_a_second_delivery(console):
    event = born_on(days=0)
    run_action(console, "deliver_now", [event])
    deliveries_enqueue_due()

    response = run_action(console, "deliver_now", [event])

    assert any("Deliver now refused" in m for m in messages_of(response))
    assert Delivery.objects.filter(event=event).count() == 1
    assert Delivery.objects.count() == 1
    assert LogEntry.objects.filter(object_id=str(event.pk)).count() == 1


# --- the dashboard --------------------------------------------------------------------------


def test_dashboard_is_linked_from_the_index_and_titled(console):
    response = console.get(reverse("admin:index"))

    html = response.content.decode()
    assert reverse("admin:dashboard") in html
    assert "Birthday scheduler operations" in html


def test_dashboard_counts_events_backlog_and_deliveries(console):
    late = make_overdue(pending_of(UserFactory()), by=timedelta(hours=3, minutes=10))
    make_overdue(pending_of(UserFactory()), by=timedelta(minutes=5))
    UserFactory()
    completed_event(UserFactory(), finished_at=timezone.now() - timedelta(minutes=10))
    completed_event(UserFactory(), finished_at=timezone.now() - timedelta(hours=5))
    failed_event(UserFactory(), finished_at=timezone.now() - timedelta(minutes=20))
    failed_event(UserFactory(), with_delivery=False)
    # No ANALYZE: a new installation's figures are exact, not "about 0" (a few rows are counted).
    response = console.get(reverse("admin:dashboard"))

    assert response.status_code == 200
    context = response.context
    assert dict((s, n.count) for _, s, n, _ in context["status_counts"]) == {
        "PENDING": 7,
        "PROCESSING": 0,
        "COMPLETED": 2,
        "FAILED": 2,
    }
    assert all(n.exact for _, _, n, _ in context["status_counts"])
    assert not context["any_estimated"]
    assert context["backlog"].count == 2
    assert context["backlog"].oldest == late.target_timestamp_utc
    assert context["backlog_late_by"] == "3 h 10 min"
    outcomes = context["outcomes"]
    assert (outcomes["delivered_hour"], outcomes["delivered_day"]) == (1, 2)
    assert (outcomes["dead_hour"], outcomes["dead_day"]) == (1, 1)
    assert (outcomes["attempts_hour"], outcomes["failed_attempts_hour"]) == (4, 3)
    html = response.content.decode()
    assert "3 h 10 min" in html
    assert '<td class="num" data-status="COMPLETED" data-exact="yes">2</td>' in html
    assert '<td class="num" data-status="PENDING" data-exact="yes">7</td>' in html
    assert '<td class="num" data-status="PROCESSING" data-exact="yes">0</td>' in html
    assert "about" not in html.split('id="event-status"')[1].split("</table>")[0]


def test_dashboard_breaks_the_next_24_hours_of_sends_down_by_event_type(console):
    now = timezone.now()
    for birthday_in, anniversary_in in ((2, 3), (5, 48)):
        user = UserFactory(anniversary_date=date(2015, 6, 20))
        user.events.filter(event_type="BIRTHDAY").update(
            target_timestamp_utc=now + timedelta(hours=birthday_in)
        )
        user.events.filter(event_type="ANNIVERSARY").update(
            target_timestamp_utc=now + timedelta(hours=anniversary_in)
        )

    response = console.get(reverse("admin:dashboard"))

    assert response.context["chart_by_type"] == [
        ("Birthday", "BIRTHDAY", 2),
        ("Wedding anniversary", "ANNIVERSARY", 1),
    ]
    html = response.content.decode()
    assert '<strong data-event-type="BIRTHDAY">2</strong>' in html
    assert '<strong data-event-type="ANNIVERSARY">1</strong>' in html


def test_dashboard_shows_running_lost_and_stopped_processes(console):
    heartbeat(kind=ProcessKind.SCHEDULER, host="sched-1", processed=120)
    heartbeat(kind=ProcessKind.WORKER, host="worker-lost", seen_ago=timedelta(minutes=5))
    heartbeat(kind=ProcessKind.WORKER, host="worker-old", seen_ago=timedelta(minutes=30), stopped=True)
    heartbeat(kind=ProcessKind.WORKER, host="worker-gone-days", seen_ago=timedelta(days=3))

    response = console.get(reverse("admin:dashboard"))

    states = {p.host: p.state for p in response.context["processes"]}
    assert states == {"sched-1": "running", "worker-lost": "lost", "worker-old": "stopped"}
    html = response.content.decode()
    assert 'class="process-lost"' in html and "worker-lost" in html
    assert "5 min ago" in html
    # The only workers are lost or stopped: say so; the scheduler is fine.
    assert "No worker is running" in html and "No scheduler is running" not in html


def test_dashboard_says_which_zone_data_the_events_follow_and_which_process_computes_with_other(console):
    current = zone_data_version()
    EventZoneData.objects.create(
        version=current,
        moved={"Asia/Almaty": 12, "America/Mexico_City": 40},
        pass_completed_at=timezone.now(),
    )
    heartbeat(kind=ProcessKind.SCHEDULER, host="sched-1", zone_data=current)
    heartbeat(kind=ProcessKind.WORKER, host="worker-behind", zone_data="2023d")
    heartbeat(kind=ProcessKind.WORKER, host="worker-stopped", zone_data="2023d", stopped=True)

    html = console.get(reverse("admin:dashboard")).content.decode()

    assert f'<strong id="events-zone-data">{current}</strong>' in html
    assert f'<strong id="web-zone-data">{current}</strong>' in html
    assert "moved 52 events: America/Mexico_City 40, Asia/Almaty 12." in html
    # Only the running process out of step is named; the one that stopped no longer computes.
    out_of_step = html.split('id="zone-data-out-of-step"')[1].split("</p>")[0]
    assert (
        "worker worker-behind" in out_of_step
        and "(2023d)" in out_of_step
        and "worker-stopped" not in out_of_step
    )
    assert 'id="zone-data-web-out-of-step"' not in html


def test_dashboard_shows_a_pass_in_progress_and_a_web_server_behind_the_events(console):
    EventZoneData.objects.create(
        version="2023d", pass_version="2099a", moved={"Asia/Almaty": 7}, pass_started_at=timezone.now()
    )

    html = console.get(reverse("admin:dashboard")).content.decode()

    assert "A scheduler is moving them to 2099a" in html and "7 moved so far" in html
    # This web server has neither the data the events follow nor the data they move to.
    assert 'id="zone-data-web-out-of-step"' in html


def test_dashboard_draws_the_next_24_hours_of_sends_as_an_svg_bar_per_hour(console):
    now = timezone.now()
    soon = pending_of(UserFactory())
    Event.objects.filter(pk=soon.pk).update(target_timestamp_utc=now + timedelta(hours=2))
    for _ in range(3):
        event = pending_of(UserFactory())
        Event.objects.filter(pk=event.pk).update(target_timestamp_utc=now + timedelta(hours=5))
    beyond = pending_of(UserFactory())
    Event.objects.filter(pk=beyond.pk).update(target_timestamp_utc=now + timedelta(hours=30))

    response = console.get(reverse("admin:dashboard"))

    chart = response.context["chart"]
    assert len(chart.bars) == 24
    assert [bar.count for bar in chart.bars if bar.count] == [1, 3]
    assert chart.total == 4
    tallest = max(chart.bars, key=lambda bar: bar.count)
    assert tallest.height > 0 and all(bar.height <= tallest.height for bar in chart.bars)
    html = response.content.decode()
    assert "<svg" in html and html.count('class="bar"') == 24
    assert 'data-count="3"' in html
    # Drawn on the server: the live part holds no script (the page's refresh swaps it in as it is).
    assert "<script" not in html.split('id="dashboard-live"')[1].split('id="refresh-note"')[0]


def test_dashboard_with_no_data_says_so(console):
    response = console.get(reverse("admin:dashboard"))

    html = response.content.decode()
    assert response.status_code == 200
    assert "No sends scheduled in the next 24 hours" in html
    assert "No scheduler or worker has reported" in html
    assert "No scheduler is running" in html and "No worker is running" in html


def test_dashboard_queries_stay_few_however_many_events(console, django_assert_max_num_queries):
    for _ in range(15):
        failed_event(UserFactory())
    heartbeat()
    # 28 at most, each a bounded read: the session and the account; the shared figures' cache read
    # and, computed, its write (4); the events by status (the two estimates and four counts, each
    # of at most 10,001 index entries); the due backlog, the chart and its types; the deliveries'
    # outcomes, attempts, queue and due ones; the destinations, their endpoints and their dead
    # deliveries of the week; the unhealthy endpoints and what waits on them; the processes; the
    # one-row read of the time zone data the events follow.
    with django_assert_max_num_queries(28):
        console.get(reverse("admin:dashboard"))


# --- access and safety -------------------------------------------------------------------------


def test_only_staff_reach_the_console(client, django_user_model):
    for path in (reverse("admin:index"), reverse("admin:dashboard"), reverse(CHANGELIST)):
        assert client.get(path).status_code == 302  # to the login page
    clerk = django_user_model.objects.create_user(username="clerk", password="x-Pass-123!")
    client.force_login(clerk)
    response = client.get(reverse("admin:dashboard"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_admin_lives_at_settings_admin_url():
    assert reverse("admin:index") == "/" + settings.ADMIN_URL


def test_changing_admin_url_moves_the_console(client, django_user_model):
    import config.urls

    staff = django_user_model.objects.create_superuser(username="ops-bob", password="p-Ass-999!")
    client.force_login(staff)
    try:
        with override_settings(ADMIN_URL="ops-7f3a/"):
            importlib.reload(config.urls)
            clear_url_caches()
            assert reverse("admin:index") == "/ops-7f3a/"
            assert reverse("admin:dashboard") == "/ops-7f3a/dashboard/"
            assert client.get("/ops-7f3a/dashboard/").status_code == 200
            assert client.get("/admin/").status_code == 404
    finally:
        importlib.reload(config.urls)
        clear_url_caches()
    assert reverse("admin:index") == "/" + settings.ADMIN_URL


def test_failed_logins_lock_the_account_out_even_with_the_right_password(client, django_user_model):
    django_user_model.objects.create_superuser(username="ops-carol", password="Right-pass-42!")
    login = reverse("admin:login")
    for attempt in range(1, settings.AXES_FAILURE_LIMIT + 1):
        response = client.post(login, {"username": "ops-carol", "password": "wrong"})
        # The form again with an error, until the failure that reaches the limit.
        assert response.status_code == (429 if attempt == settings.AXES_FAILURE_LIMIT else 200)

    response = client.post(login, {"username": "ops-carol", "password": "Right-pass-42!"})

    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert client.get(reverse("admin:index")).status_code == 302


def test_the_right_password_logs_in_before_the_limit(client, django_user_model):
    django_user_model.objects.create_superuser(username="ops-dan", password="Right-pass-42!")
    login = reverse("admin:login")
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post(login, {"username": "ops-dan", "password": "wrong"})

    response = client.post(login, {"username": "ops-dan", "password": "Right-pass-42!"})

    assert response.status_code == 302
    assert client.get(reverse("admin:index")).status_code == 200


def test_an_action_on_more_rows_than_one_request_should_take_does_nothing_and_says_why(console, monkeypatch):
    from console import confirm

    monkeypatch.setattr(confirm, "MOST_ROWS", 1)
    events = [failed_event(UserFactory()) for _ in range(2)]

    response = run_action(console, "resend", events)

    assert any("More than 1 events are selected; nothing was done" in m for m in messages_of(response))
    assert {d.status for d in Delivery.objects.filter(event__in=events)} == {DeliveryStatus.DEAD}
