"""Old handled events go with their deliveries and attempts; nothing else does."""

import re
from datetime import UTC, date, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from freezegun import freeze_time

from delivery.actions.resend import event_resend
from delivery.dispatch import retention
from delivery.dispatch import scheduler as scheduler_module
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.dispatch.retention import (
    PrunePosition,
    history_cutoff,
    history_prune,
    history_prune_batches,
)
from delivery.dispatch.scheduler import Scheduler
from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, DeliveryStatus
from delivery.tests.pipeline import make_due
from scheduling.exceptions import SchedulingError
from scheduling.models import Event, EventStatus, EventType
from scheduling.services.occurrences import idempotency_key_for, last_handled_occurrence
from scheduling.services.transitions import Actor, events_transition
from users.services import user_update
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PENDING, PROCESSING, COMPLETED, FAILED = (
    EventStatus.PENDING,
    EventStatus.PROCESSING,
    EventStatus.COMPLETED,
    EventStatus.FAILED,
)
# Older than the default HISTORY_RETENTION (400 days) by any reckoning, and well within it.
OLD, OLDER, OLDEST, RECENT = 500, 900, 1300, 30


def handled(user, *, days_ago: int, status: str, attempts: int = 1) -> Event:
    """A past occurrence `days_ago` days back in `status`, with its delivery and `attempts` attempts."""
    target = timezone.now() - timedelta(days=days_ago)
    event = Event.objects.create(
        user=user,
        event_type=EventType.BIRTHDAY,
        status=status,
        occurrence_date=target.date(),
        target_timestamp_utc=target,
        target_timestamp_local=target.isoformat(),
        target_timezone="UTC",
        idempotency_key=idempotency_key_for(
            user_id=user.id, event_type=EventType.BIRTHDAY, occurrence_date=target.date()
        ),
    )
    delivered = status == COMPLETED
    delivery = Delivery.objects.create(
        event=event,
        idempotency_key=event.idempotency_key,
        endpoint_key="x",
        payload={"message": "Hey"},
        status={COMPLETED: DeliveryStatus.DELIVERED, FAILED: DeliveryStatus.DEAD}.get(
            status, DeliveryStatus.QUEUED
        ),
        attempts=attempts,
        max_attempts=max(attempts, 1),
        next_attempt_at=target,
    )
    DeliveryAttempt.objects.bulk_create(
        DeliveryAttempt(
            delivery=delivery,
            number=number,
            started_at=target,
            finished_at=target,
            duration_ms=5,
            outcome=AttemptOutcome.DELIVERED
            if delivered and number == attempts
            else AttemptOutcome.TRANSIENT_FAILURE,
        )
        for number in range(1, attempts + 1)
    )
    return event


def recipient():
    return UserFactory(date_of_birth=date(1990, 1, 15), timezone="UTC")


def prune_all(**options):
    batches = list(history_prune_batches(cutoff=history_cutoff(now=timezone.now()), **options))
    return {
        "events": sum(b.events for b in batches),
        "deliveries": sum(b.deliveries for b in batches),
        "attempts": sum(b.attempts for b in batches),
    }


def remaining(*events: Event) -> set:
    return set(Event.objects.filter(pk__in=[e.pk for e in events]).values_list("pk", flat=True))


# --- the service ---------------------------------------------------------------------


def test_old_completed_and_failed_events_go_with_their_deliveries_and_attempts():
    user = recipient()
    oldest = handled(user, days_ago=OLDEST, status=COMPLETED, attempts=3)
    older = handled(user, days_ago=OLDER, status=FAILED, attempts=2)
    recent = handled(user, days_ago=RECENT, status=COMPLETED)
    pending = user.events.get(status=PENDING)

    deleted = prune_all()

    assert deleted == {"events": 2, "deliveries": 2, "attempts": 5}
    assert remaining(oldest, older, recent, pending) == {recent.pk, pending.pk}
    assert not Delivery.objects.filter(event_id__in=[oldest.pk, older.pk]).exists()
    assert not DeliveryAttempt.objects.filter(delivery__event_id__in=[oldest.pk, older.pk]).exists()
    assert DeliveryAttempt.objects.filter(delivery__event=recent).count() == 1


def test_pending_and_processing_events_stay_however_old():
    user = recipient()
    resent_and_stuck = handled(user, days_ago=OLDEST, status=PROCESSING)
    failed = handled(user, days_ago=OLDER, status=FAILED)
    latest = handled(user, days_ago=RECENT, status=COMPLETED)
    overdue = user.events.get(status=PENDING)
    Event.objects.filter(pk=overdue.pk).update(target_timestamp_utc=timezone.now() - timedelta(days=OLDEST))

    prune_all()

    assert remaining(resent_and_stuck, failed, latest, overdue) == {
        resent_and_stuck.pk,
        latest.pk,
        overdue.pk,
    }
    assert Delivery.objects.filter(event=resent_and_stuck).exists()


def test_each_recipients_latest_handled_occurrence_stays_however_old():
    first, second = recipient(), recipient()
    first_older = handled(first, days_ago=OLDER, status=COMPLETED)
    first_latest = handled(first, days_ago=OLD, status=FAILED)
    only = handled(second, days_ago=OLDEST, status=COMPLETED)
    latest_before = {
        user.pk: last_handled_occurrence(recipient=user, event_type=EventType.BIRTHDAY, now=timezone.now())
        for user in (first, second)
    }

    deleted = prune_all()

    assert deleted["events"] == 1
    assert remaining(first_older, first_latest, only) == {first_latest.pk, only.pk}
    assert {
        user.pk: last_handled_occurrence(recipient=user, event_type=EventType.BIRTHDAY, now=timezone.now())
        for user in (first, second)
    } == latest_before


def test_recent_handled_events_stay():
    user = recipient()
    kept = [handled(user, days_ago=days, status=COMPLETED) for days in (RECENT + 20, RECENT + 10, RECENT)]

    assert prune_all() == {"events": 0, "deliveries": 0, "attempts": 0}
    assert remaining(*kept) == {event.pk for event in kept}


def test_a_batch_is_one_select_and_three_deletes_of_at_most_the_batch_size():
    for _ in range(3):
        user = recipient()
        for days in (OLDEST, OLDER):
            handled(user, days_ago=days, status=COMPLETED, attempts=2)
        handled(user, days_ago=RECENT, status=COMPLETED)
    batches = history_prune_batches(cutoff=history_cutoff(now=timezone.now()), batch_size=4)

    with CaptureQueriesContext(connection) as first:
        batch = next(batches)

    statements = [q["sql"] for q in first.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert [s.split(" WHERE ")[0] for s in statements] == [
        "SELECT e.id, e.target_timestamp_utc FROM scheduling_event e",
        "DELETE FROM delivery_deliveryattempt",
        "DELETE FROM delivery_delivery",
        "DELETE FROM scheduling_event",
    ]
    assert "LIMIT 4 FOR UPDATE OF e SKIP LOCKED" in statements[0]
    assert (batch.events, batch.deliveries, batch.attempts) == (4, 4, 8)
    # The second batch finds the last two and, short, ends the COMPLETED part of the pass.
    rest = list(batches)
    assert [(b.events, b.next) for b in rest] == [(2, PrunePosition(status=FAILED)), (0, None)]
    assert Event.objects.filter(status=COMPLETED).count() == 3


def test_the_selection_reads_the_history_index_and_probes_the_unique_index(production_plan):
    user = recipient()
    for days in (OLDEST, OLDER, OLD):
        handled(user, days_ago=days, status=COMPLETED)
    # Statistics of the rows this test made in all three tables, not whatever an earlier
    # test or run left (an emptied table that once held an import makes every plan look alike):
    # with many recipients, probing one recipient's occurrences through the
    # unique index is what the planner must choose, as on a production table.
    for _ in range(150):
        other = recipient()
        for days in (OLDEST, OLD):
            handled(other, days_ago=days, status=COMPLETED)
    with connection.cursor() as cursor:
        for model in (Event, Delivery, DeliveryAttempt):
            cursor.execute(f"ANALYZE {model._meta.db_table}")
    cutoff = history_cutoff(now=timezone.now())
    after = PrunePosition(
        status=COMPLETED, target=timezone.now() - timedelta(days=OLDEST), id=Event.objects.first().id
    )

    for start in (None, after):
        sql, plan = production_plan(
            lambda start=start: next(history_prune_batches(cutoff=cutoff, start=start)), "SKIP LOCKED"
        )
        assert "Index Cond: (((status)::text = 'COMPLETED'::text) AND (target_timestamp_utc <" in plan, plan
        assert "event_history_idx" in plan, plan
        # The latest-occurrence test: one backward probe of (user, type, occurrence date) per row.
        assert "Index Scan Backward using event_one_per_user_type_occurrence" in plan, plan
        assert "Seq Scan" not in plan, plan
    # Each DELETE finds its rows through an index from the batch's ids. A plain or a
    # bitmap index scan are both that; which one the planner picks for a batch this
    # small depends on statistics an earlier run of a reused test database left. On
    # tables this small, hashing all of them can look cheaper than probing: not on
    # a production table, where a batch probes the index once per id.
    for statement, index in (
        ("DELETE FROM delivery_deliveryattempt WHERE", "delivery_one_per_destination"),
        ("DELETE FROM delivery_deliveryattempt WHERE", "attempt_unique_number"),
        ("DELETE FROM delivery_delivery WHERE", "delivery_one_per_destination"),
        ("DELETE FROM scheduling_event WHERE", "scheduling_event_pkey"),
    ):
        _, plan = production_plan(
            lambda: next(history_prune_batches(cutoff=cutoff)),
            statement,
            forbidden=("enable_hashjoin", "enable_mergejoin"),
        )
        assert re.search(rf"(Index Scan using {index} on|Bitmap Index Scan on {index})", plan), plan
        assert "Seq Scan" not in plan, plan


def test_a_time_boxed_pass_resumes_where_it_stopped_and_ends():
    for _ in range(3):
        user = recipient()
        handled(user, days_ago=OLDEST, status=COMPLETED)
        handled(user, days_ago=OLDER, status=FAILED)
        handled(user, days_ago=RECENT, status=COMPLETED)
    cutoff = history_cutoff(now=timezone.now())

    # No time at all: each call runs its one batch, and says where to go on.
    passes = []
    start = None
    while True:
        totals = history_prune(cutoff=cutoff, seconds=0, batch_size=2, start=start)
        passes.append((totals.batches, totals.events))
        start = totals.next
        if start is None:
            break

    assert passes == [(1, 2), (1, 1), (1, 2), (1, 1)]
    assert Event.objects.filter(status__in=[COMPLETED, FAILED]).count() == 3
    # Time enough: one call does a whole pass, batch after batch (a new recipient's only,
    # so latest, handled event stays; the other old one goes).
    only = handled(recipient(), days_ago=OLDEST, status=COMPLETED)
    older = handled(user, days_ago=OLDEST, status=FAILED)
    totals = history_prune(cutoff=cutoff, seconds=60, batch_size=1)
    assert (totals.batches, totals.events, totals.next) == (3, 1, None)
    assert remaining(only, older) == {only.pk}


class FakeClock:
    """Each reading is 50 ms after the last; sleeps are recorded, not slept."""

    def __init__(self):
        self.now = 0.0
        self.slept = []

    def monotonic(self) -> float:
        self.now += 0.05
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 6))


def test_resting_after_each_batch_that_found_rows_for_a_multiple_of_its_time(monkeypatch):
    for _ in range(3):
        user = recipient()
        handled(user, days_ago=OLDEST, status=COMPLETED)
        handled(user, days_ago=RECENT, status=COMPLETED)
    clock = FakeClock()
    monkeypatch.setattr(retention, "time", clock)

    batches = list(history_prune_batches(cutoff=history_cutoff(now=timezone.now()), batch_size=2, rest=3.0))

    # COMPLETED: 2, then 1 (short: on to FAILED), FAILED: nothing; each batch takes one 50 ms tick.
    assert [b.events for b in batches] == [2, 1, 0]
    assert clock.slept == [0.15, 0.15]


def test_a_dry_run_counts_what_the_real_run_deletes_and_deletes_nothing():
    user = recipient()
    handled(user, days_ago=OLDEST, status=COMPLETED, attempts=3)
    handled(user, days_ago=OLDER, status=FAILED, attempts=2)
    handled(user, days_ago=RECENT, status=COMPLETED)
    before = (Event.objects.count(), Delivery.objects.count(), DeliveryAttempt.objects.count())

    counted = prune_all(dry_run=True, batch_size=1)

    assert (Event.objects.count(), Delivery.objects.count(), DeliveryAttempt.objects.count()) == before
    assert counted == prune_all() == {"events": 2, "deliveries": 2, "attempts": 5}


def test_an_operator_resending_a_pruned_event_is_refused_not_an_error():
    user = recipient()
    old_failure = handled(user, days_ago=OLDER, status=FAILED)
    handled(user, days_ago=RECENT, status=COMPLETED)
    prune_all()

    with pytest.raises(SchedulingError, match="no longer exists"):
        event_resend(event=old_failure, operator="ops-alice")


# --- the command ---------------------------------------------------------------------


def run_prune_history(*args) -> str:
    out = StringIO()
    call_command("prune_history", *args, stdout=out)
    return out.getvalue()


def test_prune_history_dry_run_reports_counts_per_table_and_changes_nothing():
    user = recipient()
    handled(user, days_ago=OLDEST, status=COMPLETED, attempts=3)
    handled(user, days_ago=OLDER, status=FAILED, attempts=2)
    handled(user, days_ago=RECENT, status=COMPLETED)
    before = (Event.objects.count(), Delivery.objects.count(), DeliveryAttempt.objects.count())

    output = run_prune_history("--dry-run")

    assert "Would delete 2 events, 2 deliveries, 5 attempts" in output, output
    assert (Event.objects.count(), Delivery.objects.count(), DeliveryAttempt.objects.count()) == before


def test_prune_history_deletes_in_batches_printing_progress_and_totals():
    for _ in range(3):
        user = recipient()
        handled(user, days_ago=OLDEST, status=COMPLETED, attempts=2)
        handled(user, days_ago=RECENT, status=COMPLETED)

    output = run_prune_history("--batch-size", "2", "--verbosity", "2")

    assert "  1 batches: 2 events, 2 deliveries, 4 attempts" in output, output
    assert "  2 batches: 3 events, 3 deliveries, 6 attempts" in output, output
    assert "Deleted 3 events, 3 deliveries, 6 attempts in 3 batches" in output, output
    assert Event.objects.filter(status=COMPLETED).count() == 3


@pytest.mark.parametrize("option", [("--batch-size", "0"), ("--rest", "-1")])
def test_prune_history_refuses_a_batch_size_below_one_or_a_negative_rest(option):
    with pytest.raises(CommandError, match="--batch-size must be at least 1, --rest at least 0"):
        run_prune_history(*option)


# --- the scheduler ---------------------------------------------------------------------


def test_run_scheduler_once_claims_what_is_due_then_prunes(settings):
    settings.WEBHOOK_URL = "http://127.0.0.1:9/hook"
    user = recipient()
    old = handled(user, days_ago=OLDER, status=COMPLETED)
    latest = handled(user, days_ago=RECENT, status=COMPLETED)
    due = user.events.get(status=PENDING)
    make_due([due])

    call_command("run_scheduler", once=True)

    assert Event.objects.get(pk=due.pk).status == PROCESSING
    assert remaining(old, latest, due) == {latest.pk, due.pk}


def test_the_scheduler_prunes_only_in_a_long_enough_idle_spell_and_at_most_every_interval():
    user = recipient()
    old = [handled(user, days_ago=days, status=COMPLETED) for days in (OLDEST, OLDER)]
    handled(user, days_ago=RECENT, status=COMPLETED)
    scheduler = Scheduler()
    prune = next(task for task in scheduler.side_tasks if task.name == "prune history")

    # The next target is too close: no pass.
    scheduler.run_side_tasks(idle=scheduler_module.PRUNE_MIN_IDLE / 2)
    assert len(remaining(*old)) == 2
    # Idle long enough: a pass.
    scheduler.run_side_tasks(idle=1.0)
    assert remaining(*old) == set()
    # More history, but the last pass was just now: none until PRUNE_EVERY has passed.
    again = handled(user, days_ago=OLD, status=COMPLETED)
    scheduler.run_side_tasks(idle=1.0)
    assert remaining(again) == {again.pk}
    prune.last -= scheduler_module.PRUNE_EVERY
    scheduler.run_side_tasks(idle=1.0)
    assert remaining(again) == set()


class WokenListener:
    """A notification connection on which an event made due now has just been announced."""

    def wait(self, timeout: float) -> bool:
        return True


def test_a_wake_up_ends_the_schedulers_pass_after_the_batch_in_progress(monkeypatch):
    user = recipient()
    old = [handled(user, days_ago=days, status=COMPLETED) for days in (OLDEST, OLDER, OLD)]
    handled(user, days_ago=RECENT, status=COMPLETED)
    monkeypatch.setattr(scheduler_module, "PRUNE_BATCH_SIZE", 1)
    scheduler = Scheduler()
    scheduler.listener = WokenListener()

    scheduler.run_side_tasks(idle=1.0)

    # One batch, then the wake-up: the loop claims instead of sleeping, the pass resumes later.
    assert len(remaining(*old)) == 2
    assert scheduler.woken
    assert scheduler.prune_from is not None


# --- rescheduling after pruning ----------------------------------------------------------


def test_after_pruning_a_zone_change_never_resends_an_occurrence_already_handled(settings):
    settings.WEBHOOK_URL = "http://127.0.0.1:9/hook"
    # A retention so short that today's sent birthday is already "old".
    settings.HISTORY_RETENTION = timedelta(hours=1)
    with freeze_time("2025-11-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 11, 22), timezone="Asia/Tokyo")
    for sent_at in ("2025-11-22T00:00:01Z", "2026-11-22T00:00:01Z"):  # 09:00 in Tokyo
        with freeze_time(sent_at):
            deliveries_enqueue_due()
            claimed = Event.objects.get(user=user, status=PROCESSING)
            events_transition(events=[claimed], source=PROCESSING, target=COMPLETED, actor=Actor.WORKER)

    with freeze_time("2026-11-22T02:00:00Z"):
        deleted = prune_all()
        # when the recipient moves to Chicago, where today's 09:00 (15:00 UTC) is still ahead
        user_update(user=user, data={"timezone": "America/Chicago"})

    # then last year's occurrence went, today's (sent) stayed and is not scheduled again
    assert deleted["events"] == 1
    assert sorted(Event.objects.filter(user=user).values_list("occurrence_date", "status")) == [
        (date(2026, 11, 22), COMPLETED),
        (date(2027, 11, 22), PENDING),
    ]
    assert Event.objects.get(user=user, status=PENDING).target_timestamp_utc == datetime(
        2027, 11, 22, 15, tzinfo=UTC
    )
