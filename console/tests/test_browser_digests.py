"""A daily digest in a real browser: an operator gives a destination a digest time, sees the next digest in the
console, and, once that morning has come, the digest among the deliveries.

Chromium and its pages come from console/tests/conftest.py, the live server from pytest-django. The test's
clock: the next digest's instant is brought to now, as if that morning had come.
"""

from __future__ import annotations

import re
from datetime import date

import pytest
from django.urls import reverse
from django.utils import timezone

from console.tests.test_browser import PASSWORD, deliver_due_in_a_thread, log_in
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Destination
from devtools.sink import WebhookSink
from users.services import user_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_gives_a_destination_a_digest_time_and_sees_the_next_digest_then_the_digest(
    page, live_server, settings, django_user_model
):
    settings.WEBHOOK_URL = ""
    with WebhookSink() as sink:
        team = destination_create(
            settings=DestinationSettings(name="team", url=sink.url, format="slack"), operator="ops"
        ).destination
        django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
        log_in(page, live_server, username="ops-alice", password=PASSWORD)

        # The operator gives the destination a digest at 00:01 Berlin (the next one: tomorrow's, or later).
        page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[team.pk]))
        page.fill("#id_digest_time", "00:01")
        page.fill("#id_digest_timezone", "Europe/Berlin")
        page.select_option("#id_weekend", "ON_THE_DAY")
        page.click("input[name=_save]")
        page.wait_for_url(re.compile(r".*/delivery/destination/$"))

        # The list says so, with the next digest's date; the destination's page too.
        team.refresh_from_db()
        next_date = team.next_digest_date
        assert next_date is not None
        row = page.locator("#result_list tr", has_text="team").first.inner_text()
        assert "daily 00:01 Europe/Berlin" in row and next_date.isoformat() in row
        page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[team.pk]))
        assert next_date.isoformat() in page.locator(".field-next_digest").inner_text()

        # Two recipients born on that date; the morning comes; the scheduler builds it, a worker sends it.
        for first in ("Ada", "Grace"):
            user_create(
                first_name=first,
                last_name="Lovelace",
                date_of_birth=date(1990, next_date.month, next_date.day),
                timezone="Europe/Berlin",
            )
        Destination.objects.filter(pk=team.pk).update(next_digest_at=timezone.now())
        Scheduler(once=True).run()
        deliver_due_in_a_thread()

        # The receiver got one message naming both; the Deliveries page shows the digest.
        [received] = sink.received
        assert "Ada Lovelace's birthday" in received.body["text"] and "Grace" in received.body["text"]
        page.goto(live_server.url + reverse("admin:delivery_delivery_changelist"))
        assert (
            f"Daily digest of {next_date.isoformat()}: 2 occurrences"
            in page.locator("#result_list").inner_text()
        )
