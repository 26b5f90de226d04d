"""Email with real processes: run_scheduler and run_worker mail people through local SMTP servers (aiosmtpd).

- 300 people with addresses and a SIGKILL of the worker mid-batch: every person gets one
  message, or, only for a delivery the kill left SENDING, another with the same Message-ID
  (counted per Message-ID at the server);
- a relay that greylists one address (451 then 250) and refuses another at RCPT (550): the
  first gets its greeting later, the second's delivery is DEAD and the address marked
  undeliverable, and the next occurrence ("the next day", brought due) mails it nothing;
- the one-click unsubscribe POST (RFC 8058) stops mail to that person at once, and a second
  POST changes nothing.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from datetime import date, timedelta
from typing import ClassVar

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from delivery.actions.optouts import unsubscribe_token
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import AttemptOutcome, Delivery, DeliveryStatus, Destination, DestinationOptOut
from delivery.receivers.tests.smtp_servers import Accepting, Refusing, smtp_server
from delivery.tests.pipeline import make_due, process_env, start_process, stop_all, wait_until
from scheduling.models import Event, EventStatus
from users.models import User
from users.services import users_bulk_create_with_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def people(count: int, *, prefix: str = "p") -> list[str]:
    """`count` recipients with an address each, all born today; their addresses."""
    today = date.today()
    rows = [
        {
            "first_name": f"Person{n}",
            "last_name": "Mailed",
            "date_of_birth": date(1980 + n % 30, today.month, min(today.day, 28)),
            "timezone": "UTC",
            "email": f"{prefix}{n}@example.org",
        }
        for n in range(count)
    ]
    users_bulk_create_with_events(rows=rows)
    return [row["email"] for row in rows]


def mailing_destination(url: str) -> Destination:
    return destination_create(
        settings=DestinationSettings(
            name="birthday mail",
            url=url,
            format="email",
            personal=True,
            email_from="greetings@example.com",
            email_from_name="People Team",
            max_rate=5000,
        ),
        operator="ops",
    ).destination


@pytest.fixture
def mail_settings(delivery_settings):
    delivery_settings.WEBHOOK_URL = ""
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=2)
    return delivery_settings


def test_300_people_each_get_one_message_or_after_a_sigkill_another_with_the_same_message_id(
    mail_settings, tmp_path
):
    class Slow(Accepting):
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's hook
            await asyncio.sleep(0.02)  # so that the kill falls mid-batch
            return await super().handle_DATA(server, session, envelope)

    with smtp_server(Slow()) as server:
        mailing_destination(server.url())
        addresses = people(300)
        make_due()
        env = process_env(mail_settings)
        scheduler = start_process(["run_scheduler"], env, tmp_path / "scheduler.log")
        doomed = start_process(["run_worker"], env, tmp_path / "doomed.log")
        try:
            wait_until(lambda: len(server.handler.taken) >= 60, 120, "the first messages at the server")
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(timeout=10)
            rescuer = start_process(["run_worker"], env, tmp_path / "rescuer.log")
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count() == 300,
                180,
                "every greeting delivered",
            )
        finally:
            exit_codes = stop_all([scheduler, rescuer])
        assert exit_codes == [0, 0]
        # every person got their message
        assert set(server.handler.to()) == set(addresses)
        by_id = server.handler.message_ids()
        assert len(by_id) == 300
        # twice only where the kill left the delivery mid-send (its attempt ABANDONED), never otherwise
        twice = {mid for mid, n in by_id.items() if n > 1}
        assert all(n <= 2 for n in by_id.values())
        abandoned = {
            f"<{key}@example.com>"
            for key in Delivery.objects.filter(attempt_log__outcome=AttemptOutcome.ABANDONED).values_list(
                "idempotency_key", flat=True
            )
        }
        assert twice <= abandoned


def test_a_refused_address_is_marked_and_mailed_nothing_the_next_day_and_one_click_stops_mail_at_once(
    mail_settings, tmp_path
):
    class Relay(Refusing):
        """Refuses one address for good, greylists another once."""

        greylisted: ClassVar[set[str]] = set()

        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
            if address == "grey@example.org" and address not in self.greylisted:
                self.greylisted.add(address)
                return "451 4.7.1 Greylisted"
            return await super().handle_RCPT(server, session, envelope, address, rcpt_options)

    with smtp_server(Relay(refused=frozenset({"gone@example.org"}))) as server:
        destination = mailing_destination(server.url())
        people(1, prefix="gone")  # gone0@...
        User.objects.filter(email="gone0@example.org").update(email="gone@example.org")
        people(1, prefix="grey")
        User.objects.filter(email="grey0@example.org").update(email="grey@example.org")
        stays = people(2, prefix="stays")
        leaves = people(1, prefix="leaves")
        make_due()
        env = process_env(mail_settings)

        def run_until_settled(expected_delivered: int) -> None:
            processes = [
                start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
                start_process(["run_worker"], env, tmp_path / "worker.log"),
            ]
            try:
                wait_until(
                    lambda: Delivery.objects.filter(status=DeliveryStatus.DELIVERED).count()
                    == expected_delivered
                    and not Event.objects.filter(status=EventStatus.PROCESSING).exists()
                    and not Event.objects.filter(
                        status=EventStatus.PENDING, target_timestamp_utc__lte=timezone.now()
                    ).exists(),
                    120,
                    "every greeting settled",
                )
            finally:
                assert stop_all(processes) == [0, 0]

        run_until_settled(4)
        # the greylisted address got its greeting after the 451; the refused one is DEAD and marked
        gone = User.objects.get(email="gone@example.org")
        assert gone.email_undeliverable_at is not None
        assert "550" in gone.email_undeliverable_reason
        assert Delivery.objects.get(event__user=gone).status == DeliveryStatus.DEAD
        assert server.handler.to() == Counter(["grey@example.org", *stays, *leaves])
        assert server.handler.refusals == {"gone@example.org": 1}

        # when one person unsubscribes with one click (twice: a mail client may retry)
        leaver = User.objects.get(email=leaves[0])
        token = unsubscribe_token(user_id=leaver.id, destination_id=destination.pk)
        client = Client(enforce_csrf_checks=True)
        for _ in range(2):
            answer = client.post(
                reverse("people:unsubscribe", kwargs={"token": token}),
                data="List-Unsubscribe=One-Click",
                content_type="application/x-www-form-urlencoded",
            )
            assert answer.status_code == 200
        assert DestinationOptOut.objects.filter(user=leaver, destination=destination).count() == 1

        # and the next occurrences come due ("the next day")
        server.handler.taken.clear()
        make_due(ago=timedelta(seconds=1))
        run_until_settled(4 + 3)  # grey and the two who stay

    # then the refused address and the one who left got nothing more; the others one each
    assert server.handler.to() == Counter(["grey@example.org", *stays])
    assert server.handler.refusals == {"gone@example.org": 1}
    next_year = Event.objects.filter(user=gone).order_by("-occurrence_date")[1]
    assert next_year.status == EventStatus.COMPLETED
    assert "undeliverable" in next_year.failure_reason
    left = Event.objects.filter(user=leaver).order_by("-occurrence_date")[1]
    assert left.status == EventStatus.COMPLETED
    assert not Delivery.objects.filter(event=left).exists()
