"""Mentions with real processes: run_scheduler and run_worker send to local Slack-, Discord- and Teams-shaped
receivers, which report whom each message would notify.

Per greeting and in a digest, each service notifies exactly the people who agreed
(their own consent, or MENTIONS_BY_DEFAULT, passed to the processes as set here),
each once per message, and nobody a name tries to ping.
"""

from __future__ import annotations

from collections import Counter
from contextlib import ExitStack
from datetime import date

import pytest
from django.utils import timezone

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import Delivery, DeliveryStatus, Destination
from delivery.tests.pipeline import make_due, process_env, start_process, stop_all, wait_until
from delivery.tests.test_mentions import FORMATS, PEOPLE, agreed, create_people, stored_id, whose
from kinds.tests.receivers import discord_receiver, slack_receiver, teams_receiver
from scheduling.models import Event, EventStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_scheduler_and_worker_processes_mention_exactly_those_who_agreed_per_greeting_and_in_a_digest(
    api_client, delivery_settings, tmp_path
):
    # given the company's default "yes", each service twice: one destination per greeting and one
    # daily digest, all mentioning; everyone's birthday greeting due now
    delivery_settings.WEBHOOK_URL = ""
    today = timezone.now().date()
    with ExitStack() as stack:
        makes = (slack_receiver, discord_receiver, teams_receiver)
        greeting = {f: stack.enter_context(make()) for f, make in zip(FORMATS, makes, strict=True)}
        digest = {f: stack.enter_context(make()) for f, make in zip(FORMATS, makes, strict=True)}
        for format_ in FORMATS:
            for receiver, extra in ((greeting[format_], {}), (digest[format_], {"digest_time": "09:00"})):
                destination_create(
                    settings=DestinationSettings(
                        name=f"{format_} {'digest' if extra else 'greetings'}",
                        url=receiver.url,
                        format=format_,
                        mention_recipient=True,
                        max_rate=50,
                        digest_timezone="UTC" if extra else "",
                        **extra,
                    ),
                    operator="ops",
                )
        create_people(api_client, born=date(1990, today.month, min(today.day, 28)))
        birthdays = list(Event.objects.filter(status=EventStatus.PENDING, event_type="BIRTHDAY"))
        # Their occurrence's date (today's, or the 28th's for a month's later days): the digests name it.
        (named,) = {event.occurrence_date for event in birthdays}
        make_due(birthdays)
        env = process_env(delivery_settings, MENTIONS_BY_DEFAULT="true")
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
            start_process(["run_worker"], env, tmp_path / "worker.log"),
        ]
        try:
            # when the greetings are due now, and, once they are sent, the digests naming the same people
            # (brought due before the scheduler's first turn, a date was seen set back to the one its
            # settings give, today's, which names nobody)
            delivered = Delivery.objects.filter(status=DeliveryStatus.DELIVERED)
            wait_until(
                lambda: delivered.count() == len(FORMATS) * len(PEOPLE), 90, "every greeting delivered"
            )
            Destination.objects.exclude(digest_time=None).update(
                next_digest_date=named, next_digest_at=timezone.now()
            )
            wait_until(
                lambda: delivered.count() == len(FORMATS) * (len(PEOPLE) + 1), 90, "every digest delivered"
            )
        finally:
            exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    for format_ in FORMATS:
        # then each greeting mentions the one person it greets, if they agreed and have an id there
        assert greeting[format_].refused == [] and len(greeting[format_].taken) == len(PEOPLE)
        for judgement in greeting[format_].taken:
            person = whose(judgement.shown)
            wanted = stored_id(person, format_) if agreed(person, by_default=True) else None
            assert judgement.mentioned == ((wanted,) if wanted else ()), (format_, person)
        # and the digest mentions each of them once, and nobody else
        (taken,) = digest[format_].taken
        wanted = [
            stored_id(p, format_) for p in PEOPLE if agreed(p, by_default=True) and stored_id(p, format_)
        ]
        assert Counter(taken.mentioned) == Counter(wanted), format_
        assert len(wanted) == 4  # Ada, the two whose names try to ping a crowd, and Linus by the default
