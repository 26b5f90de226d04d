"""Scheduler and worker in-process against a real local HTTP receiver and PostgreSQL."""

import json
import time
from datetime import date, timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from delivery.actions.resend import delivery_resend
from delivery.dispatch.scheduler import Scheduler
from delivery.models import AttemptOutcome, Delivery, DeliveryStatus, Destination
from delivery.receivers.transport import USER_AGENT
from delivery.tests.pipeline import create_due_users, key_of, make_due, shown_attempts
from delivery.worker.expiry import deliveries_expire_late
from delivery.worker.loop import Worker
from devtools.sink import Reply
from scheduling.models import Event, EventStatus, EventType
from users.services import user_create, user_update

pytestmark = pytest.mark.django_db


def new_user(**overrides):
    fields = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": date(1990, 3, 8),
        "timezone": "America/New_York",
    }
    return user_create(**{**fields, **overrides})


def run_scheduler_once():
    Scheduler(once=True).run()


def run_worker_once(**options):
    Worker(once=True, **options).run()


def deliver_until_settled(rounds: int = 20):
    """Run the worker until nothing is queued (retries are made to come due quickly)."""
    for _ in range(rounds):
        run_worker_once()
        pending = Delivery.objects.filter(status__in=[DeliveryStatus.QUEUED, DeliveryStatus.SENDING])
        if not pending.exists():
            return
        Delivery.objects.filter(status=DeliveryStatus.QUEUED).update(next_attempt_at=timezone.now())
    raise AssertionError("deliveries did not settle")


def test_user_due_now_is_delivered_once_with_body_headers_and_key(delivery_settings, sink):
    user = new_user()
    event = user.events.get()
    make_due([event])

    call_command("run_scheduler", once=True)
    call_command("run_worker", once=True)

    assert len(sink.received) == 1
    received = sink.received[0]
    assert received.body == {
        "message": "Hey, Ada Lovelace it's your birthday",
        "event_id": str(event.id),
        "event_type": "BIRTHDAY",
        "user_id": str(user.id),
        "occurrence_date": "2027-03-08",
        "target_timestamp_utc": Event.objects.get(pk=event.pk).target_timestamp_utc.isoformat(),
    }
    assert received.headers["Content-Type"] == "application/json"
    assert received.headers["X-Idempotency-Key"] == event.idempotency_key
    assert received.headers["User-Agent"] == USER_AGENT
    event.refresh_from_db()
    assert event.status == EventStatus.COMPLETED
    assert event.executed_at is not None
    assert event.version == 3  # PENDING -> PROCESSING -> COMPLETED
    upcoming = user.events.get(status=EventStatus.PENDING)
    assert upcoming.occurrence_date == date(2028, 3, 8)
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DELIVERED
    assert list(shown_attempts(delivery, "number", "outcome", "status_code")) == [
        (1, AttemptOutcome.DELIVERED, 200)
    ]


def test_running_again_sends_nothing_more(delivery_settings, sink):
    make_due([new_user().events.get()])
    run_scheduler_once()
    run_worker_once()

    run_scheduler_once()
    run_worker_once()

    assert len(sink.received) == 1


def test_a_delivery_signed_during_a_rotation_verifies_with_either_secret(delivery_settings, sink):
    old, new = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
    delivery_settings.WEBHOOK_SECRET = f"{new} {old}"
    make_due([new_user().events.get()])

    run_scheduler_once()
    run_worker_once()

    received = sink.received[0]
    assert received.headers["webhook-id"] == received.idempotency_key
    for secret in (old, new):
        assert Webhook(secret).verify(received.raw_body, received.headers)["message"].startswith("Hey, Ada")


def test_503_twice_then_200_is_delivered_on_the_third_attempt_with_the_same_key(delivery_settings, sink):
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=503), Reply(status=503), Reply(status=200))

    run_scheduler_once()
    deliver_until_settled()

    assert [r.idempotency_key for r in sink.received] == [event.idempotency_key] * 3
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DELIVERED
    assert list(shown_attempts(delivery, "number", "outcome", "status_code")) == [
        (1, AttemptOutcome.TRANSIENT_FAILURE, 503),
        (2, AttemptOutcome.TRANSIENT_FAILURE, 503),
        (3, AttemptOutcome.DELIVERED, 200),
    ]
    event.refresh_from_db()
    assert event.status == EventStatus.COMPLETED
    assert event.deliveries.get().attempts - 1 == 2  # two retries (the API's retry_count)


def test_404_fails_the_event_at_once_when_the_receiver_accepts_other_messages(delivery_settings, sink):
    event = new_user().events.get()
    others = [new_user(first_name=f"Other{i}").events.get() for i in range(3)]
    make_due([event, *others])
    sink.script(event.idempotency_key, Reply(status=404, delay=0.2))

    run_scheduler_once()
    run_worker_once()

    event.refresh_from_db()
    assert event.status == EventStatus.FAILED
    assert "404" in event.failure_reason
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD
    assert delivery.attempt_log.get().outcome == AttemptOutcome.PERMANENT_FAILURE
    assert sorted(r.idempotency_key for r in sink.received) == sorted(
        e.idempotency_key for e in [event, *others]
    )


def test_422_fails_the_event_at_once_even_when_nothing_else_is_sent(delivery_settings, sink):
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=422))

    run_scheduler_once()
    run_worker_once()

    event.refresh_from_db()
    assert event.status == EventStatus.FAILED
    assert "422" in event.failure_reason
    assert Delivery.objects.get(event=event).status == DeliveryStatus.DEAD
    assert len(sink.received) == 1


def test_a_lone_404_is_the_endpoints_failure_and_is_tried_again_not_dead(delivery_settings, sink):
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=404))

    run_scheduler_once()
    deliver_until_settled()

    event.refresh_from_db()
    assert event.status == EventStatus.COMPLETED
    outcomes = [(a.status_code, a.outcome) for a in shown_attempts(Delivery.objects.get(event=event))]
    assert outcomes == [(404, AttemptOutcome.PERMANENT_FAILURE), (200, AttemptOutcome.DELIVERED)]


def test_a_hanging_receiver_times_out_and_is_retried(delivery_settings, sink):
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=0.5)
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=200, delay=2.0))

    run_scheduler_once()
    deliver_until_settled()

    attempts = list(shown_attempts(Delivery.objects.get(event=event)))
    assert [a.outcome for a in attempts] == [AttemptOutcome.TRANSIENT_FAILURE, AttemptOutcome.DELIVERED]
    assert "Timed out" in attempts[0].error
    assert attempts[0].status_code is None
    assert 400 <= attempts[0].duration_ms < 2000


def test_429_with_retry_after_waits_as_asked(delivery_settings, sink):
    delivery_settings.DELIVERY_RETRY_MAX = timedelta(seconds=60)
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=429, headers={"Retry-After": "30"}))

    run_scheduler_once()
    before = timezone.now()
    run_worker_once()

    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.QUEUED
    wait = (delivery.next_attempt_at - before).total_seconds()
    assert 29 <= wait <= 31
    run_worker_once()  # not due yet: nothing is sent
    assert len(sink.received) == 1


def test_a_receiver_throttling_a_delivery_past_the_lateness_cannot_keep_it_waiting(delivery_settings, sink):
    # Given a delivery queued 49 h ago whose every answer is 429 with a Retry-After: each
    # answer puts its next attempt off again, so it never looks due long enough ago to expire
    delivery_settings.EVENT_MAX_LATENESS = timedelta(hours=48)
    event = new_user().events.get()
    make_due([event])
    run_scheduler_once()
    Delivery.objects.filter(event=event).update(created_at=timezone.now() - timedelta(hours=49))
    sink.script(event.idempotency_key, Reply(status=429, headers={"Retry-After": "30"}))

    run_worker_once()

    # Then the worker recording the answer gives it up, with the lateness as the reason
    delivery = Delivery.objects.get(event=event)
    event.refresh_from_db()
    assert delivery.status == DeliveryStatus.DEAD
    assert event.status == EventStatus.FAILED
    assert event.failure_reason.startswith("Not delivered within EVENT_MAX_LATENESS (48 h) of being queued")
    assert event.failure_reason.endswith("last: HTTP 429 (Too Many Requests)")


def test_a_resent_delivery_gets_the_lateness_again_from_the_resend(delivery_settings, sink):
    # Given a delivery queued 49 h ago, DEAD, then resent by an operator, and throttled once
    delivery_settings.EVENT_MAX_LATENESS = timedelta(hours=48)
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=422), Reply(status=429, headers={"Retry-After": "30"}))
    run_scheduler_once()
    Delivery.objects.filter(event=event).update(created_at=timezone.now() - timedelta(hours=49))
    run_worker_once()
    delivery_resend(delivery=Delivery.objects.get(event=event), operator="ops")

    run_worker_once()

    # Then it waits as the receiver asked, neither given up by the worker nor by the expiry
    assert deliveries_expire_late(now=timezone.now()) == 0
    delivery = Delivery.objects.get(event=event)
    assert (delivery.status, delivery.last_status_code) == (DeliveryStatus.QUEUED, 429)
    assert delivery.requeued_at is not None


def test_retry_after_beyond_the_cap_is_cut_to_the_cap(delivery_settings, sink):
    delivery_settings.DELIVERY_RETRY_MAX = timedelta(seconds=5)
    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=503, headers={"Retry-After": "86400"}))

    run_scheduler_once()
    before = timezone.now()
    run_worker_once()

    wait = (Delivery.objects.get(event=event).next_attempt_at - before).total_seconds()
    assert 4 <= wait <= 6


def test_attempts_used_up_make_the_delivery_dead_and_the_event_failed(delivery_settings, sink):
    delivery_settings.DELIVERY_MAX_ATTEMPTS = 3
    sink.default = Reply(status=500)
    event = new_user().events.get()
    make_due([event])

    run_scheduler_once()
    deliver_until_settled()

    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD
    assert delivery.attempts == 3
    event.refresh_from_db()
    assert event.status == EventStatus.FAILED
    assert event.failure_reason == "Gave up after 3 attempts; last: HTTP 500 (Internal Server Error)"
    assert len(sink.received) == 3


def test_after_downtime_overdue_events_are_sent_and_too_late_ones_failed(delivery_settings, sink):
    recent = new_user(first_name="Recent").events.get()
    yesterday = new_user(first_name="Yesterday").events.get()
    ancient = new_user(first_name="Ancient").events.get()
    make_due([recent], ago=timedelta(minutes=5))
    make_due([yesterday], ago=timedelta(hours=30))
    make_due([ancient], ago=timedelta(hours=49))

    run_scheduler_once()
    run_worker_once()

    assert sorted(sink.keys()) == sorted([recent.idempotency_key, yesterday.idempotency_key])
    ancient.refresh_from_db()
    assert ancient.status == EventStatus.FAILED
    assert "EVENT_MAX_LATENESS" in ancient.failure_reason
    assert not Delivery.objects.filter(event=ancient).exists()
    # Every user, the too-late one included, has their next birthday scheduled.
    assert Event.objects.filter(status=EventStatus.PENDING).count() == 3


def test_a_once_run_queues_what_is_due_before_it_repairs_recipients_without_an_event(delivery_settings):
    due = new_user(first_name="Due").events.get()
    make_due([due], ago=timedelta(minutes=5))
    orphan = new_user(first_name="Orphan")
    orphan.events.all().delete()  # as a write that went around the signals leaves a recipient

    run_scheduler_once()

    repaired = orphan.events.get(status=EventStatus.PENDING)
    assert Delivery.objects.get(event=due).created_at < repaired.created_at


def test_scheduler_logs_the_backlog_at_start(delivery_settings, caplog):
    make_due([new_user().events.get()], ago=timedelta(hours=2))

    with caplog.at_level("INFO", logger="delivery.dispatch.scheduler"):
        run_scheduler_once()

    started = [r for r in caplog.records if "Scheduler started" in r.getMessage()]
    assert "1 overdue event(s), targets from" in started[0].getMessage()


def test_user_edit_while_processing_leaves_that_delivery_alone_and_the_next_follows_new_data(
    delivery_settings, sink
):
    user = new_user()
    event = user.events.get()
    make_due([event])
    run_scheduler_once()  # PROCESSING, delivery queued, next year's PENDING created

    user_update(user=user, data={"date_of_birth": date(1990, 7, 14), "timezone": "Asia/Tokyo"})

    event.refresh_from_db()
    assert event.status == EventStatus.PROCESSING
    assert event.version == 2
    assert event.target_timezone == "America/New_York"
    upcoming = user.events.get(status=EventStatus.PENDING)
    assert upcoming.occurrence_date.month == 7 and upcoming.occurrence_date.day == 14
    assert upcoming.target_timezone == "Asia/Tokyo"
    run_worker_once()
    assert sink.keys() == [event.idempotency_key]
    event.refresh_from_db()
    assert event.status == EventStatus.COMPLETED


def test_a_renamed_user_gets_the_new_name_in_the_message(delivery_settings, sink):
    user = new_user()
    event = user.events.get()
    user_update(user=user, data={"first_name": "Augusta", "last_name": "King"})
    make_due([event])

    run_scheduler_once()
    run_worker_once()

    assert sink.received[0].body["message"] == "Hey, Augusta King it's your birthday"


def test_timezone_change_keeps_the_key_the_receiver_sees(delivery_settings, sink):
    user = new_user()
    key = user.events.get().idempotency_key
    user_update(user=user, data={"timezone": "Australia/Sydney"})
    make_due()

    run_scheduler_once()
    run_worker_once()

    assert sink.keys() == [key]


def test_an_anniversary_is_delivered_end_to_end_and_the_next_one_is_scheduled(delivery_settings, sink):
    # given a married recipient whose anniversary is due, and whose birthday is not
    user = new_user(anniversary_date=date(2015, 6, 20))
    anniversary = user.events.get(event_type=EventType.ANNIVERSARY)
    birthday = Event.objects.values().get(user=user, event_type=EventType.BIRTHDAY)
    make_due([anniversary])

    # when the scheduler and the worker run
    call_command("run_scheduler", once=True)
    call_command("run_worker", once=True)

    # then the receiver got the anniversary message once, under its own key
    assert len(sink.received) == 1
    received = sink.received[0]
    assert received.body == {
        "message": "Hey, Ada Lovelace happy anniversary",
        "event_id": str(anniversary.id),
        "event_type": "ANNIVERSARY",
        "user_id": str(user.id),
        "occurrence_date": anniversary.occurrence_date.isoformat(),
        "target_timestamp_utc": Event.objects.get(pk=anniversary.pk).target_timestamp_utc.isoformat(),
    }
    assert received.headers["X-Idempotency-Key"] == anniversary.idempotency_key
    anniversary.refresh_from_db()
    assert anniversary.status == EventStatus.COMPLETED
    assert Delivery.objects.get(event=anniversary).status == DeliveryStatus.DELIVERED
    # and next year's anniversary is pending at 09:00 local, the birthday untouched
    upcoming = user.events.get(event_type=EventType.ANNIVERSARY, status=EventStatus.PENDING)
    assert upcoming.occurrence_date == anniversary.occurrence_date.replace(
        year=anniversary.occurrence_date.year + 1
    )
    assert upcoming.target_timestamp_local.startswith(f"{upcoming.occurrence_date.isoformat()}T09:00:00")
    assert Event.objects.values().get(id=birthday["id"]) == birthday


@pytest.mark.django_db
def test_a_worker_without_any_destination_starts_and_has_nothing_to_send(settings):
    # given no WEBHOOK_URL to seed from, and no destination
    settings.WEBHOOK_URL = ""

    # when a worker runs until nothing is due
    call_command("run_worker", once=True)

    # then it ran, seeded nothing and sent nothing
    assert not Destination.objects.exists()
    assert not Delivery.objects.exists()


def test_delivery_claim_uses_the_partial_index(delivery_settings, production_plan):
    from delivery.worker.leases import deliveries_claim

    create_due_users(20)
    run_scheduler_once()

    def claim():
        return deliveries_claim(worker="explain", limit=100, lease=timedelta(seconds=30))

    _, queued_plan = production_plan(claim, "ORDER BY next_attempt_at")
    _, expired_plan = production_plan(claim, "ORDER BY locked_until")

    assert "delivery_queued_due_idx" in queued_plan, queued_plan
    assert "delivery_lease_idx" in expired_plan, expired_plan


def test_worker_writes_a_heartbeat(delivery_settings):
    from runtime.models import ProcessHeartbeat

    run_worker_once()

    beat = ProcessHeartbeat.objects.get(kind="worker")
    assert beat.stopped_at is not None
    assert json.dumps(beat.pid)
    assert time.time() - beat.last_seen_at.timestamp() < 60


def test_resending_a_dead_delivery_goes_to_its_destinations_current_url_under_the_same_key(
    delivery_settings, sink
):
    from delivery.actions.resend import delivery_resend
    from delivery.destinations.services import destination_update
    from delivery.tests.pipeline import ScriptedSink

    event = new_user().events.get()
    make_due([event])
    sink.script(event.idempotency_key, Reply(status=422))
    run_scheduler_once()
    run_worker_once()
    delivery = Delivery.objects.get(event=event)
    assert delivery.status == DeliveryStatus.DEAD

    with ScriptedSink() as new_receiver:
        destination_update(
            destination=delivery.destination, operator="support", changes={"url": new_receiver.url}
        )
        delivery_resend(delivery=delivery, operator="support")
        run_worker_once()

    assert new_receiver.keys() == [event.idempotency_key]
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.DELIVERED
    assert delivery.endpoint_key == key_of(new_receiver.url)
    assert list(shown_attempts(delivery, "number", "outcome")) == [
        (1, AttemptOutcome.PERMANENT_FAILURE),
        (2, AttemptOutcome.DELIVERED),
    ]
    event.refresh_from_db()
    assert event.status == EventStatus.COMPLETED
    assert Delivery.objects.filter(event=event).count() == 1


def test_the_claim_summary_counts_the_events_held_back_by_a_pause(delivery_settings, caplog):
    # given two due events, one of a paused recipient
    held, sent = new_user(), new_user(first_name="Grace")
    user_update(user=held, data={"paused": True}, by="ops")
    make_due([held.events.get(), sent.events.get()])

    # when the scheduler claims them
    with caplog.at_level("INFO", logger="delivery.dispatch.scheduler"):
        run_scheduler_once()

    # then its line accounts for both: one queued, one held back by the pause
    [line] = [r for r in caplog.records if r.getMessage().startswith("Claimed ")]
    assert line.getMessage() == (
        "Claimed 2 due event(s): 1 queued for delivery, 0 too late, 1 held back by a pause, "
        "0 with no destination subscribed"
    )
    assert (line.claimed, line.queued, line.paused) == (2, 1, 1)


def test_a_worker_line_for_a_chat_format_names_no_user_id_rather_than_none(delivery_settings, sink, caplog):
    # given a destination in Slack's format, whose body does not name the recipient
    Destination.objects.update(format=Destination.Format.SLACK)
    user = new_user()
    make_due([user.events.get()])
    run_scheduler_once()

    # when the worker sends it
    with caplog.at_level("INFO", logger="delivery.worker.record"):
        run_worker_once()

    # then its lines carry the event id and no user_id=None
    lines = [r for r in caplog.records if hasattr(r, "event_id")]
    assert lines
    assert all(getattr(r, "user_id", "absent") != None for r in lines)  # noqa: E711
    assert {r.event_id for r in lines} == {str(user.events.order_by("occurrence_date").first().id)}
