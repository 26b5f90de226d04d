"""A destination's recovery: what it counts, how the workers queue it again in batches, what it refuses."""

from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from delivery.actions.recovery import (
    RECOVERY_TRANSITIONS,
    RecoveryRefused,
    recoveries_advance,
    recoveries_transition,
    recovery_cancel,
    recovery_create,
    recovery_preview,
)
from delivery.actions.tests.recovery_data import TUESDAY_8, WEDNESDAY_10, end
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create, destination_update
from delivery.models import Delivery, DeliveryStatus, Recovery, RecoveryStatus
from delivery.states.transitions import DELIVERY_TRANSITIONS
from delivery.tests.pipeline import create_due_users, key_of
from scheduling.exceptions import InvalidStateTransition
from scheduling.models import Event, EventStatus

pytestmark = pytest.mark.django_db

DEAD, DELIVERED, QUEUED = DeliveryStatus.DEAD, DeliveryStatus.DELIVERED, DeliveryStatus.QUEUED


def advance_all(batch_size: int):
    batches = []
    while (batch := recoveries_advance(batch_size=batch_size)) is not None:
        batches.append(batch)
    return batches


# --- the tables --------------------------------------------------------------------------


def test_the_recovery_table_moves_only_forward_and_only_the_unfinished_ones_end():
    assert set(RECOVERY_TRANSITIONS) == {
        ("PENDING", "RUNNING"),
        ("PENDING", "FINISHED"),
        ("RUNNING", "FINISHED"),
        ("PENDING", "CANCELLED"),
        ("RUNNING", "CANCELLED"),
    }
    assert (DELIVERED, QUEUED) in DELIVERY_TRANSITIONS and (DEAD, QUEUED) in DELIVERY_TRANSITIONS


# --- the count, shown first ---------------------------------------------------------------


@pytest.mark.parametrize(
    "states, expected", [([DELIVERED], 4), ([DEAD], 2), ([DEAD, DELIVERED], 6), ([DELIVERED, DEAD], 6)]
)
def test_the_preview_counts_the_destinations_deliveries_in_those_states_that_ended_in_the_half_open_window(
    history, states, expected
):
    crm, _, _ = history

    count = recovery_preview(destination=crm, states=states, since=TUESDAY_8, until=WEDNESDAY_10)

    assert count == expected
    assert not Recovery.objects.exists()


def test_a_preview_of_another_destination_counts_its_own_only(history):
    _, chat, _ = history

    assert recovery_preview(destination=chat, states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10) == 12


@pytest.mark.parametrize(
    "values, field",
    [
        ({"states": []}, "states"),
        ({"states": ["QUEUED"]}, "states"),
        ({"states": ["SENDING", "DEAD"]}, "states"),
        ({"states": ["LOST"]}, "states"),
        ({"states": ["DEAD", "DEAD"]}, "states"),
        ({"since": WEDNESDAY_10, "until": TUESDAY_8}, "until"),
        ({"since": TUESDAY_8, "until": TUESDAY_8}, "until"),
        ({"since": datetime(2026, 11, 24, 8, 0)}, "since"),
        ({"until": datetime(2026, 11, 25, 10, 0)}, "until"),
        ({"since": None}, "since"),
        (
            {"since": timezone.now() + timedelta(hours=1), "until": timezone.now() + timedelta(hours=2)},
            "since",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field_and_nothing_is_created(history, values, field):
    crm, _, _ = history
    asked = {"states": [DELIVERED], "since": TUESDAY_8, "until": WEDNESDAY_10, **values}

    with pytest.raises(ValidationError) as refused:
        recovery_create(destination=crm, operator="ops", **asked)

    assert field in refused.value.message_dict
    assert not Recovery.objects.exists()
    assert not Delivery.objects.filter(status=QUEUED).exists()


def test_nothing_to_recover_is_refused(history):
    crm, _, _ = history

    with pytest.raises(ValidationError, match="nothing to recover"):
        recovery_create(
            destination=crm,
            operator="ops",
            states=[DEAD],
            since=WEDNESDAY_10,
            until=WEDNESDAY_10 + timedelta(hours=1),
        )

    assert not Recovery.objects.exists()


def test_a_disabled_destination_is_refused_and_a_paused_one_accepted(history):
    crm, chat, _ = history
    destination_update(destination=crm, operator="ops", changes={"enabled": False})

    with pytest.raises(RecoveryRefused, match="disabled"):
        recovery_create(
            destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10
        )
    from delivery.destinations.services import destination_pause

    destination_pause(destination=chat, operator="ops")
    assert (
        recovery_create(
            destination=chat, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10
        ).total
        == 12
    )


def test_one_recovery_at_a_time_per_destination_the_database_says_so_too(history):
    crm, chat, _ = history
    first = recovery_create(
        destination=crm, operator="ops", states=[DEAD], since=TUESDAY_8, until=WEDNESDAY_10
    )

    with pytest.raises(RecoveryRefused, match="already under way"):
        recovery_create(
            destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10
        )
    with pytest.raises(IntegrityError), transaction.atomic():
        Recovery.objects.create(
            destination=crm,
            states=[DEAD],
            since=TUESDAY_8,
            until=WEDNESDAY_10,
            requested_by="x",
            requested_at=timezone.now(),
            total=1,
        )
    recovery_create(destination=chat, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10)
    recovery_cancel(recovery=first, operator="ops")
    recovery_create(destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10)


@pytest.mark.parametrize(
    "fields",
    [
        {"since": WEDNESDAY_10, "until": TUESDAY_8},
        {"states": ["QUEUED"]},
        {"states": []},
        {"status": "RUNNING!"},
        {"status": "FINISHED"},  # ended, without its time
    ],
)
def test_the_database_refuses_what_the_service_refuses(history, fields):
    crm, _, _ = history
    row = {
        "destination": crm,
        "states": [DEAD],
        "since": TUESDAY_8,
        "until": WEDNESDAY_10,
        "requested_by": "x",
        "requested_at": timezone.now(),
        "total": 1,
        **fields,
    }

    with pytest.raises(IntegrityError), transaction.atomic():
        Recovery.objects.create(**row)


# --- the workers' batches --------------------------------------------------------------


def test_the_workers_queue_exactly_the_counted_deliveries_again_in_batches_same_key_and_reopen_their_events(
    history,
):
    crm, chat, deliveries = history
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DELIVERED, DEAD], since=TUESDAY_8, until=WEDNESDAY_10
    )
    inside = {d.pk: d for d in deliveries[:4] + deliveries[8:10]}
    keys_before = {d.pk: d.idempotency_key for d in inside.values()}

    batches = advance_all(batch_size=4)

    assert [(b.requeued, b.skipped, b.more) for b in batches] == [(4, 0, True), (2, 0, True), (0, 0, False)]
    recovery.refresh_from_db()
    assert (recovery.status, recovery.total, recovery.done, recovery.skipped, recovery.batches) == (
        RecoveryStatus.FINISHED,
        6,
        6,
        0,
        2,
    )
    assert recovery.finished_at is not None
    requeued = {d.pk: d for d in Delivery.objects.filter(status=QUEUED)}
    assert set(requeued) == set(inside)
    for pk, delivery in requeued.items():
        assert delivery.idempotency_key == keys_before[pk]
        assert delivery.requeued_at is not None and delivery.delivered_at is None
        assert delivery.max_attempts == delivery.attempts + 8
        assert delivery.last_error == ""
    assert not Delivery.objects.filter(destination=chat).exclude(status=DELIVERED).exists()
    reopened = Event.objects.filter(deliveries__in=list(inside)).distinct()
    assert {e.status for e in reopened} == {EventStatus.PROCESSING}
    assert set(reopened.values_list("failure_reason", flat=True)) == {""}


def test_a_requeued_delivery_goes_to_the_destinations_current_url_in_its_current_format(history):
    crm, _, deliveries = history
    destination_update(
        destination=crm, operator="ops", changes={"url": "https://crm2.example.org/hook", "format": "slack"}
    )
    recovery_create(destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10)

    advance_all(batch_size=500)

    requeued = Delivery.objects.filter(status=QUEUED)
    assert requeued.count() == 4
    for delivery in requeued:
        assert delivery.endpoint_key == key_of("https://crm2.example.org/hook")
        assert "text" in delivery.payload and "message" not in delivery.payload


def test_what_ended_after_the_request_is_not_taken_even_inside_the_window(history):
    crm, _, deliveries = history
    until = timezone.now() + timedelta(days=1)
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=until
    )
    assert recovery.total == 6  # the four on Tuesday, the two at Wednesday 10:00
    # a delivery of the window delivered again after the request (another resend, say)
    end(deliveries[:1], status=DELIVERED, at=timezone.now() + timedelta(seconds=1))

    advance_all(batch_size=2)

    recovery.refresh_from_db()
    assert (recovery.done, recovery.skipped, recovery.status) == (5, 1, RecoveryStatus.FINISHED)
    assert Delivery.objects.get(pk=deliveries[0].pk).status == DELIVERED


def test_a_delivery_gone_or_whose_recipient_lost_the_date_is_skipped_and_counted(history):
    crm, _, deliveries = history
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10
    )
    # one recipient erased (their deliveries go with them), one event pruned
    from users.services import user_erase

    user_erase(user=deliveries[0].event.user)
    Event.objects.filter(pk=deliveries[1].event_id).delete()

    advance_all(batch_size=500)

    recovery.refresh_from_db()
    assert (recovery.total, recovery.done, recovery.skipped) == (4, 2, 2)
    assert set(Delivery.objects.filter(status=QUEUED).values_list("pk", flat=True)) == {
        deliveries[2].pk,
        deliveries[3].pk,
    }


def test_a_cancelled_recovery_stops_and_keeps_what_it_queued(history):
    crm, _, _ = history
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DELIVERED, DEAD], since=TUESDAY_8, until=WEDNESDAY_10
    )
    recoveries_advance(batch_size=1)

    recovery_cancel(recovery=recovery, operator="ops")

    assert recoveries_advance(batch_size=500) is None
    recovery.refresh_from_db()
    assert (recovery.status, recovery.done) == (RecoveryStatus.CANCELLED, 1)
    assert Delivery.objects.filter(status=QUEUED).count() == 1
    with pytest.raises(InvalidStateTransition):
        recovery_cancel(recovery=recovery, operator="ops")


def test_a_move_from_a_status_the_row_has_left_is_refused(history):
    crm, _, _ = history
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DEAD], since=TUESDAY_8, until=WEDNESDAY_10
    )
    stale = Recovery.objects.get(pk=recovery.pk)
    recovery_cancel(recovery=recovery, operator="ops")

    with pytest.raises(InvalidStateTransition, match="no longer PENDING"):
        recoveries_transition(recovery=stale, target=RecoveryStatus.RUNNING)


def test_a_batch_that_fails_leaves_nothing_half_done(history, monkeypatch):
    crm, _, _ = history
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DELIVERED], since=TUESDAY_8, until=WEDNESDAY_10
    )
    import delivery.actions.recovery as module

    def outage(**kwargs):
        raise RuntimeError("the database went away mid-batch")

    monkeypatch.setattr(module, "events_reopen", outage)
    with pytest.raises(RuntimeError):
        recoveries_advance(batch_size=500)
    monkeypatch.undo()

    recovery.refresh_from_db()
    assert (recovery.status, recovery.done, recovery.batches) == (RecoveryStatus.PENDING, 0, 0)
    assert not Delivery.objects.filter(status=QUEUED).exists()
    advance_all(batch_size=500)
    recovery.refresh_from_db()
    assert (recovery.status, recovery.done) == (RecoveryStatus.FINISHED, 4)


# --- in a worker ---------------------------------------------------------------------------


def test_a_worker_run_carries_a_recovery_out_and_its_deliveries_arrive_again_under_the_same_keys(
    delivery_settings, sink
):
    from collections import Counter

    from delivery.dispatch.scheduler import Scheduler
    from delivery.worker.loop import Worker

    delivery_settings.WEBHOOK_URL = ""
    crm = destination_create(
        settings=DestinationSettings(name="crm", url=sink.url), operator="ops"
    ).destination
    started = timezone.now()
    create_due_users(5)
    Scheduler(once=True).run()
    Worker(once=True).run()
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == 5
    recovery = recovery_create(
        destination=crm, operator="ops", states=[DELIVERED], since=started, until=timezone.now()
    )
    delivery_settings.DELIVERY_RECOVERY_BATCH = 2

    Worker(once=True).run()

    recovery.refresh_from_db()
    assert (recovery.status, recovery.total, recovery.done, recovery.batches) == (
        RecoveryStatus.FINISHED,
        5,
        5,
        3,
    )
    assert set(Counter(sink.keys()).values()) == {2}
    assert Event.objects.filter(status=EventStatus.COMPLETED).count() == 5
    assert Delivery.objects.filter(status=DELIVERED).count() == 5
