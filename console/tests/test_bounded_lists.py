"""What an operator sees of a long list: a count that stops at a bound, orderings an index serves.

The plans behind these pages are checked in test_history_reads.py; these tests are
about what the pages show.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings

from console.pagination import MOST_ROWS_COUNTED, BoundedPaginator
from console.tests.console_data import completed_event
from console.widgets import LatestRowsFormSet
from delivery.models import Delivery
from scheduling.models import Event, EventStatus
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

A = f"/{settings.ADMIN_URL}"


# --- the bounded count, as an operator sees it --------------------------------------------------


def test_a_list_longer_than_the_bound_says_more_than_and_pages_up_to_it(console, monkeypatch):
    UserFactory.create_batch(3)
    # The bound, lowered so a handful of rows is beyond it.
    monkeypatch.setattr(BoundedPaginator, "bound", 2)

    response = console.get(f"{A}users/user/")

    cl = response.context["cl"]
    assert (cl.result_count, cl.paginator.more, cl.paginator.num_pages) == (2, True, 1)
    assert "more than 2 recipients" in response.content.decode()
    assert not cl.can_show_all


def test_a_list_within_the_bound_is_counted_exactly(console):
    UserFactory.create_batch(3)

    response = console.get(f"{A}users/user/")

    cl = response.context["cl"]
    assert (cl.result_count, cl.paginator.more) == (3, False)
    assert "3 recipients" in response.content.decode()
    assert MOST_ROWS_COUNTED >= 1000


# --- the orderings an index serves --------------------------------------------------------------


def test_events_in_one_status_come_by_send_time_and_otherwise_by_when_they_were_scheduled(console):
    first, second = (completed_event(UserFactory()) for _ in range(2))
    Event.objects.filter(pk=first.pk).update(
        target_timestamp_utc=second.target_timestamp_utc + timedelta(days=1)
    )

    in_status = console.get(f"{A}scheduling/event/", {"status__exact": "COMPLETED"}).context["cl"]
    across = console.get(f"{A}scheduling/event/").context["cl"]

    assert [e.pk for e in in_status.result_list] == [first.pk, second.pk]
    assert [e.pk for e in across.result_list] == sorted((e.pk for e in across.result_list), reverse=True)
    assert "target_utc" in in_status.sortable_by and not across.sortable_by


def test_deliveries_in_one_status_come_last_changed_first_and_otherwise_newest_first(console):
    older, newer = (completed_event(UserFactory()).deliveries.get() for _ in range(2))
    Delivery.objects.filter(pk=older.pk).update(updated_at=newer.updated_at + timedelta(minutes=1))

    in_status = console.get(f"{A}delivery/delivery/", {"status__exact": "DELIVERED"}).context["cl"]
    across = console.get(f"{A}delivery/delivery/").context["cl"]

    assert [d.pk for d in in_status.result_list] == [older.pk, newer.pk]
    assert [d.pk for d in across.result_list] == [newer.pk, older.pk]


def test_a_recipient_page_shows_the_latest_events_however_many_years_there_are(console):
    user = UserFactory()
    for years_ago in range(1, 26):
        completed_event(user, years_ago=years_ago)

    response = console.get(f"{A}users/user/{user.pk}/change/")

    (inline,) = response.context["inline_admin_formsets"]
    shown = [form.original for form in inline]
    assert len(shown) == LatestRowsFormSet.shown
    assert shown == sorted(shown, key=lambda e: e.occurrence_date, reverse=True)
    assert shown[0].status == EventStatus.PENDING
