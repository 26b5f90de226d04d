"""Recover in a real browser (Debian's Chromium driven by Playwright, console/tests/conftest.py):
the operator picks a destination, the states and the window, sees the count, confirms, and sees it done."""

from __future__ import annotations

import re
from collections import Counter
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from console.tests.test_browser import (  # noqa: F401 - the sink fixture (browser and page: conftest.py)
    PASSWORD,
    deliver_due_in_a_thread,
    log_in,
    sink,
)
from delivery.models import Delivery, DeliveryStatus, Recovery, RecoveryStatus
from delivery.scheduler import Scheduler
from delivery.services.destinations import destination_create
from delivery.tests.conftest import make_due
from users.tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_operator_recovers_what_a_destination_got_in_a_window_seeing_the_count_first(
    page, live_server, settings, sink, django_user_model  # noqa: F811 - fixtures
):
    # given a receiver that got three greetings and lost them
    settings.WEBHOOK_URL = ""
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=5)
    crm = destination_create(name="crm", url=sink.url, operator="ops").destination
    for _ in range(3):
        UserFactory()
    make_due()
    Scheduler(once=True).run()
    deliver_due_in_a_thread()
    assert Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 3
    since = timezone.now() - timedelta(hours=1)
    django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)

    # the operator opens the destination from the list, then Recover
    log_in(page, live_server, username="ops-alice", password=PASSWORD)
    page.goto(live_server.url + reverse("admin:delivery_destination_changelist"))
    page.get_by_role("link", name="crm", exact=True).click()
    page.wait_for_url(re.compile(rf".*/delivery/destination/{crm.pk}/change/$"))
    page.click("#destination-recover")
    page.wait_for_url(re.compile(rf".*/delivery/destination/{crm.pk}/recover/$"))

    # chooses Delivered only and the last hour, and counts
    page.uncheck("input[name=states][value=DEAD]")
    page.check("input[name=states][value=DELIVERED]")
    page.fill("#id_since", since.strftime("%Y-%m-%dT%H:%M:%S"))
    page.fill("#id_until", (timezone.now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S"))
    page.click("#recover-count-button")
    page.wait_for_selector("#recover-count")

    # sees the count before anything is recorded, and confirms it
    assert page.locator("#recover-count").inner_text() == "3"
    assert not Recovery.objects.exists()
    page.click("#recover-yes")
    page.wait_for_url(re.compile(rf".*/delivery/destination/{crm.pk}/change/.*"))
    assert "Recovery recorded" in page.locator("ul.messagelist").inner_text()
    assert page.locator("#recoveries tr.recovery .recovery-status").inner_text().strip() == "Pending"

    # a worker carries it out; the page shows it done
    deliver_due_in_a_thread()
    page.reload()
    row = page.locator("#recoveries tr.recovery")
    assert row.locator(".recovery-status").inner_text().strip() == "Finished"
    assert row.locator(".recovery-progress").inner_text().strip() == "3 of 3 queued again"
    assert Recovery.objects.get().status == RecoveryStatus.FINISHED
    assert set(Counter(sink.keys()).values()) == {2}
