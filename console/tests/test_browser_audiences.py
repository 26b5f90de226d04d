"""Labels and audiences in a real browser: an operator labels recipients, gives a destination an audience, and
the next greetings go to the destination only for its people.

Chromium and its pages come from console/tests/conftest.py, the live server from pytest-django.
"""

from __future__ import annotations

import re
from datetime import date

import pytest
from django.urls import reverse

from console.tests.test_browser import PASSWORD, deliver_due_in_a_thread, log_in
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Destination
from delivery.tests.pipeline import make_due
from devtools.sink import WebhookSink
from users.models import User
from users.services import user_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def label_recipient(page, live_server, user: User, labels: str) -> None:
    """Open the recipient's page, type their labels, save."""
    page.goto(live_server.url + reverse("admin:users_user_change", args=[user.pk]))
    page.fill("#id_labels", labels)
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r".*/users/user/$"))


def give_audience(page, live_server, destination: Destination, labels: str) -> None:
    page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[destination.pk]))
    page.fill("#id_audience_labels", labels)
    page.click("input[name=_save]")
    page.wait_for_url(re.compile(r".*/delivery/destination/$"))


def test_operator_labels_recipients_gives_a_destination_an_audience_and_only_its_people_are_greeted_there(
    page, live_server, settings, django_user_model
):
    settings.WEBHOOK_URL = ""
    with WebhookSink() as platform_sink, WebhookSink() as everyone_sink:
        platform = destination_create(
            settings=DestinationSettings(name="platform", url=platform_sink.url), operator="ops"
        ).destination
        destination_create(
            settings=DestinationSettings(name="everyone", url=everyone_sink.url), operator="ops"
        )
        people = {
            name: user_create(
                first_name=name, last_name="Doe", date_of_birth=date(1990, 3, 8), timezone="UTC"
            )
            for name in ("Ada", "Bob", "Cy")
        }
        django_user_model.objects.create_superuser(username="ops-alice", password=PASSWORD)
        log_in(page, live_server, username="ops-alice", password=PASSWORD)

        # The operator labels two recipients, one with a label off the grammar first (refused on the page).
        page.goto(live_server.url + reverse("admin:users_user_change", args=[people["Ada"].pk]))
        page.fill("#id_labels", "team platform!")
        page.click("input[name=_save]")
        assert "holds a space" in page.locator(".field-labels .errorlist").inner_text()
        label_recipient(page, live_server, people["Ada"], "Team:Platform, office:berlin")
        label_recipient(page, live_server, people["Bob"], "team:data")

        # The list shows the labels and filters by one typed in the box.
        page.goto(live_server.url + reverse("admin:users_user_changelist"))
        assert "office:berlin, team:platform" in page.locator("#result_list").inner_text()
        page.fill(".bs-label-filter input[name=label]", "team:data")
        page.click(".bs-label-filter input[type=submit]")
        page.wait_for_url(re.compile(r".*label=team%3Adata.*"))
        assert page.locator("#result_list tbody tr").count() == 1
        assert "Bob" in page.locator("#result_list").inner_text()

        # The platform destination greets team:platform only; its page says whom.
        give_audience(page, live_server, platform, "team:platform")
        assert "team:platform" in page.locator("#result_list tr", has_text="platform").first.inner_text()
        page.goto(live_server.url + reverse("admin:delivery_destination_change", args=[platform.pk]))
        assert page.locator(".field-audience_size").inner_text().strip().endswith("1 recipient(s)")

        # The next greetings: Ada at the platform channel and everyone's, the others at everyone's only.
        make_due()
        Scheduler(once=True).run()
        deliver_due_in_a_thread()

        assert {r.body["user_id"] for r in platform_sink.received} == {str(people["Ada"].pk)}
        assert {r.body["user_id"] for r in everyone_sink.received} == {str(u.pk) for u in people.values()}
