"""The person's say for real: run_scheduler and run_worker processes, local receivers, each counted.

- 300 people in three teams, each public, private or not celebrated: three team channels
  (Slack-, Discord- and Teams-shaped), an everyone destination, a personal one and a daily
  digest each get exactly the people they should, once each.
- An opt-out made after the scheduler claimed the occurrence and before any worker sent it:
  nothing arrives for that person; the occurrence FAILS with the reason.
- A digest built after an opt-out leaves the person out; one built before it and not yet
  sent is rendered again without them.
"""

from __future__ import annotations

import time as clock
from datetime import date, time, timedelta

import pytest
from django.utils import timezone

from delivery.destinations.services import destination_url_fields
from delivery.models import Delivery, DeliveryStatus, Destination, Digest
from delivery.states.endpoints import endpoint_for_destination
from delivery.tests.pipeline import ScriptedSink, make_due, process_env, start_process, stop_all, wait_until
from scheduling.celebration import NOT_CELEBRATED, ChangedBy, Visibility
from scheduling.models import Event, EventStatus, EventType
from users.models import CelebrationChange, User
from users.services import user_update, users_bulk_create_with_events

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TEAMS = ("team:a", "team:b", "team:c")
CHANNEL_FORMATS = ("slack", "discord", "teams")


def _destination(*, url: str, **fields) -> Destination:
    """A destination saved as the product saves one: its URL kept by its key, its endpoint made."""
    destination = Destination.objects.create(**destination_url_fields(url=url), max_rate=5000, **fields)
    endpoint_for_destination(destination=destination)
    return destination


def _visibility_of(number: int) -> str:
    # 2 in 10 private, 1 in 10 not celebrated, the rest public.
    return {0: Visibility.PRIVATE, 1: Visibility.PRIVATE, 2: Visibility.NONE}.get(
        number % 10, Visibility.PUBLIC
    )


def _people(count: int, *, day: date) -> None:
    """`count` people born on `day`'s month and day, in three teams, with their visibility, imported."""
    users_bulk_create_with_events(
        rows=[
            {
                "first_name": f"Person{number}",
                "last_name": "Counted",
                "date_of_birth": date(1985, day.month, day.day),
                "timezone": "Europe/Berlin",
                "labels": [TEAMS[number % 3]],
                # Public is the company default: only the others choose.
                "visibility": {EventType.BIRTHDAY: visibility}
                if (visibility := _visibility_of(number)) != Visibility.PUBLIC
                else {},
            }
            for number in range(count)
        ],
        by="test import",
    )


def _people_by_key() -> dict[str, str]:
    """Each birthday's idempotency key, to the first name of its person."""
    return dict(
        Event.objects.filter(event_type=EventType.BIRTHDAY).values_list("idempotency_key", "user__first_name")
    )


def _greeted(sink: ScriptedSink, people: dict[str, str]) -> list[str]:
    """The people a receiver accepted a greeting of, by name, each as often as it was accepted."""
    return sorted(people[r.idempotency_key] for r in sink.received if 200 <= r.status < 300)


def _digest_names(sink: ScriptedSink) -> list[list[str]]:
    """Each digest the receiver accepted, as the first names of the people it names."""
    names = {str(user_id): first for user_id, first in User.objects.values_list("id", "first_name")}
    return [
        sorted(names[entry["user_id"]] for entry in r.body["occurrences"])
        for r in sink.received
        if 200 <= r.status < 300
    ]


def test_public_private_and_none_reach_exactly_their_receivers_across_team_channels_everyone_personal_and_a_digest(
    delivery_settings, tmp_path
):
    # given 300 people born on one day, a third in each team, 2 in 10 private and 1 in 10 not
    # celebrated; a channel per team, an everyone destination, a personal one and a daily digest
    delivery_settings.WEBHOOK_URL = ""
    day = timezone.now().date() + timedelta(days=5)
    _people(300, day=day)
    names = {number: f"Person{number}" for number in range(300)}
    public = {number for number in names if _visibility_of(number) == Visibility.PUBLIC}
    private = {number for number in names if _visibility_of(number) == Visibility.PRIVATE}
    sinks = [ScriptedSink() for _ in range(6)]
    for sink in sinks:
        sink.__enter__()
    try:
        channels = [
            _destination(
                name=f"channel {team}", url=sinks[n].url, format=CHANNEL_FORMATS[n], audience_labels=[team]
            )
            for n, team in enumerate(TEAMS)
        ]
        _destination(name="everyone", url=sinks[3].url)
        _destination(name="their own inbox", url=sinks[4].url, personal=True)
        digest = _destination(
            name="daily digest",
            url=sinks[5].url,
            digest_time=time(9, 0),
            digest_timezone="Europe/Berlin",
            next_digest_date=day,
            next_digest_at=timezone.now() + timedelta(days=1),
        )
        people = _people_by_key()
        expected_requests = sum(len(public & {n for n in names if n % 3 == t}) for t in range(3))
        expected_requests += len(public) + len(public | private) + 1

        # when their birthdays' send time and the digest's time come, with a scheduler and two workers
        make_due()
        Destination.objects.filter(pk=digest.pk).update(next_digest_at=timezone.now())
        env = process_env(delivery_settings)
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
            start_process(["run_worker"], env, tmp_path / "worker1.log"),
            start_process(["run_worker"], env, tmp_path / "worker2.log"),
        ]
        try:
            wait_until(
                lambda: sum(len(sink.received) for sink in sinks) >= expected_requests
                and not Event.objects.filter(status__in=[EventStatus.PENDING, EventStatus.PROCESSING])
                .filter(occurrence_date=day)
                .exists(),
                90,
                "every greeting to arrive",
            )
            clock.sleep(2)  # anything sent that should not be would arrive now
        finally:
            exit_codes = stop_all(processes)
    finally:
        for sink in sinks:
            sink.__exit__(None, None, None)

    # then each team channel got exactly its public people, once each
    assert exit_codes == [0, 0, 0]
    for team_number, channel in enumerate(channels):
        expected = sorted(names[n] for n in public if n % 3 == team_number)
        assert _greeted(sinks[team_number], people) == expected, channel.name
        assert len(expected) == 70
    # and the everyone destination every public person, the personal one the public and private
    assert _greeted(sinks[3], people) == sorted(names[n] for n in public)
    assert _greeted(sinks[4], people) == sorted(names[n] for n in public | private)
    # and the digest one message naming exactly the public people
    assert _digest_names(sinks[5]) == [sorted(names[n] for n in public)]
    # and nobody not celebrated was sent anything; their occurrence failed with the reason
    assert len(public) == 210 and len(private) == 60
    not_celebrated = Event.objects.filter(
        occurrence_date=day, user__first_name__in=[names[n] for n in range(2, 300, 10)]
    )
    assert {(e.status, e.failure_reason) for e in not_celebrated} == {(EventStatus.FAILED, NOT_CELEBRATED)}
    assert not_celebrated.count() == 30
    # and each imported choice is recorded as the import's
    assert CelebrationChange.objects.filter(changed_by=ChangedBy.IMPORT, actor="test import").count() == 90


def test_an_opt_out_after_the_claim_and_before_the_send_is_honoured_and_the_unsent_digest_leaves_them_out(
    delivery_settings, tmp_path
):
    # given three people born on one day, a Slack channel for everyone and a daily digest
    delivery_settings.WEBHOOK_URL = ""
    day = timezone.now().date() + timedelta(days=5)
    _people(3, day=day)  # Person0, Person1 private, Person2 not celebrated: all made public below
    for user in User.objects.all():
        user_update(
            user=user,
            data={"visibility": {EventType.BIRTHDAY: None}},
            by="ops",
            changed_by=ChangedBy.OPERATOR,
        )
    with ScriptedSink() as channel_sink, ScriptedSink() as digest_sink:
        _destination(name="general", url=channel_sink.url, format="slack")
        digest = _destination(
            name="daily digest",
            url=digest_sink.url,
            digest_time=time(9, 0),
            digest_timezone="Europe/Berlin",
            next_digest_date=day,
            next_digest_at=timezone.now() + timedelta(days=1),
        )
        people = _people_by_key()
        env = process_env(delivery_settings)
        # when the scheduler alone claims the birthdays and builds the digest (no worker yet)
        make_due()
        Destination.objects.filter(pk=digest.pk).update(next_digest_at=timezone.now())
        processes = [start_process(["run_scheduler"], env, tmp_path / "scheduler.log")]
        try:
            wait_until(
                lambda: Delivery.objects.filter(status=DeliveryStatus.QUEUED, event__isnull=False).count()
                == 3
                and Digest.objects.exists(),
                30,
                "the claim and the digest to queue their deliveries",
            )
            # and Person1 opts out through the API's service, before any worker has sent anything
            opted_out = User.objects.get(first_name="Person1")
            user_update(
                user=opted_out,
                data={"visibility": {EventType.BIRTHDAY: Visibility.NONE}},
                by="hr-system",
                changed_by=ChangedBy.API_CLIENT,
            )
            # and then the workers start
            processes.append(start_process(["run_worker"], env, tmp_path / "worker.log"))
            wait_until(
                lambda: len(channel_sink.received) >= 2 and len(digest_sink.received) >= 1, 30, "the sends"
            )
            clock.sleep(2)
        finally:
            exit_codes = stop_all(processes)

        # then nothing arrived for them, at the channel nor in the digest
        assert exit_codes == [0, 0]
        assert _greeted(channel_sink, people) == ["Person0", "Person2"]
        assert _digest_names(digest_sink) == [["Person0", "Person2"]]
    # and their occurrence failed with the reason, and the change is on record
    event = Event.objects.get(user=opted_out, occurrence_date=day)
    assert (event.status, event.failure_reason) == (EventStatus.FAILED, NOT_CELEBRATED)
    change = CelebrationChange.objects.filter(user=opted_out).latest("changed_at")
    assert (change.changed_by, change.actor, change.old_value, change.new_value) == (
        ChangedBy.API_CLIENT,
        "hr-system",
        "",
        "none",
    )


def test_a_digest_built_after_an_opt_out_leaves_the_person_out(delivery_settings, tmp_path):
    # given five public people born on one day and a daily digest
    delivery_settings.WEBHOOK_URL = ""
    day = timezone.now().date() + timedelta(days=5)
    _people(5, day=day)
    for user in User.objects.all():
        user_update(
            user=user,
            data={"visibility": {EventType.BIRTHDAY: None}},
            by="ops",
            changed_by=ChangedBy.OPERATOR,
        )
    # when one of them opts out, choosing private, before the digest is built
    user_update(
        user=User.objects.get(first_name="Person3"),
        data={"visibility": {EventType.BIRTHDAY: Visibility.PRIVATE}},
        by="ops",
        changed_by=ChangedBy.OPERATOR,
    )
    with ScriptedSink() as digest_sink:
        digest = _destination(
            name="daily digest",
            url=digest_sink.url,
            digest_time=time(9, 0),
            digest_timezone="Europe/Berlin",
            next_digest_date=day,
            next_digest_at=timezone.now(),
        )
        env = process_env(delivery_settings)
        processes = [
            start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
            start_process(["run_worker"], env, tmp_path / "worker.log"),
        ]
        try:
            wait_until(lambda: len(digest_sink.received) >= 1, 30, "the digest")
            clock.sleep(1)
        finally:
            exit_codes = stop_all(processes)
        # then the digest names the others, not them
        assert exit_codes == [0, 0]
        assert _digest_names(digest_sink) == [["Person0", "Person1", "Person2", "Person4"]]
    assert Digest.objects.get(destination=digest).local_date == day
