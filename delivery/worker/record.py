"""Writing attempts down and applying their outcomes: a few set-based statements per batch.

Per batch: the endpoint's health first when its answers say anything new
(delivery.rules.health: a failure, a throttle, or the first success after failures),
so every decision knows whether the receiver is down; then one UPDATE of the
deliveries for each outcome kind present (delivered, to retry, waiting on the
endpoint, dead), each checked against the lease; one insert of
the attempt log for the rows whose lease held, but for the successes, whose attempt the
delivered rows' update records (delivery.states.successes); then the events whose last
delivery ended here conclude (delivery.states.conclude). A result whose lease was lost (another worker took the
delivery over) changes nothing: that worker owns it now and resends it under
the same idempotency key.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from delivery.models import AttemptOutcome, DeliveryAttempt, DeliveryStatus
from delivery.receivers.protocol import SendResult
from delivery.rules.answers import Signal
from delivery.rules.health import Answer, Health, HealthPolicy
from delivery.rules.retry import Decision, RetryPolicy, decide
from delivery.states.conclude import start_events_completion_alone, start_events_conclusion
from delivery.states.endpoints import Verdict, endpoint_note_success, endpoint_record_answers
from delivery.states.transitions import Rows, start_deliveries_transition
from runtime.sql import insert_rows, pipeline
from users.services import recipient_email_undeliverable_mark

logger = logging.getLogger(__name__)


class AttemptLogRow(NamedTuple):
    """One attempt as the attempt log stores it: its fields are the columns written."""

    delivery_id: uuid.UUID
    number: int
    worker: str
    started_at: datetime
    finished_at: datetime
    duration_ms: int
    outcome: str
    status_code: int | None
    error: str
    response_excerpt: str


# The attempt log's columns written: the row's, then what the decision made of it.
ATTEMPT_COLUMNS = (*AttemptLogRow._fields, "counted", "delivery_status_after")


class AttemptRecord(NamedTuple):
    """One finished (or abandoned) attempt, with what follows from it.

    Named tuples, this and the log's row it carries: immutable, and each made in one
    step, where a frozen dataclass sets every field through object.__setattr__. A batch
    makes one per answer, and its attempt log inserts the rows as they are.
    """

    row: AttemptLogRow
    decision: Decision
    max_attempts: int


@dataclass
class RecordSummary:
    delivered: int = 0
    retrying: int = 0
    waiting: int = 0
    dead: int = 0
    lease_lost: int = 0
    # The health of each endpoint this batch had to weigh, as it now stands.
    verdicts: dict[str, Health] = field(default_factory=dict)


def attempts_apply(
    *,
    records: Sequence[AttemptRecord],
    now: datetime,
    held_by: str | None = None,
    expired_before: datetime | None = None,
    events: Mapping[uuid.UUID, uuid.UUID | None],
) -> set[uuid.UUID]:
    """Apply each record's decision to its delivery and event, and log the attempts; return the ids applied.

    The caller's transaction holds it together. Only deliveries still under the
    lease described (`held_by` a worker, or `expired_before` a time) move.
    `events` is the event of each delivery as the caller knows it (from its
    claim, or its look for expired leases), so that the conclusion's lock and
    read go with the moves.
    """
    ended = (DeliveryStatus.DELIVERED, DeliveryStatus.DEAD)
    # Two round trips whatever the batch holds (runtime.sql.pipeline): the moves of every
    # kind together, with the conclusion's lock and read for the events the moves may end;
    # then the attempt log and the events' moves, sent here and waited for by the caller's
    # pipeline or this one's end.
    with pipeline():
        moves = [
            _start_deliveries_move(
                records=group,
                status=status,
                charged=charged,
                keeps_due=keeps_due,
                now=now,
                held_by=held_by,
                expired_before=expired_before,
            )
            for (status, charged, keeps_due), group in _by_move(records=records).items()
        ]
        # After the moves, so that the read sees them and the lock order is the deliveries', then the events'.
        # The events whose deliveries all ended DELIVERED here first, in one UPDATE with no lock or read
        # (start_events_completion_alone); the general path's lock and read then pass them over.
        start_events_completion_alone(
            delivered={
                r.row.delivery_id: events[r.row.delivery_id]
                for r in records
                if r.decision.status == DeliveryStatus.DELIVERED
            },
            now=now,
        )
        concluding = start_events_conclusion(
            event_ids={events[r.row.delivery_id] for r in records if r.decision.status in ended}, now=now
        )
        applied: dict[uuid.UUID, uuid.UUID] = {}  # delivery id -> event id
        for moved in moves:
            applied.update(moved())
        # The attempt log in one INSERT (sent in this pipeline, where COPY cannot go), the rows as they are,
        # each with what it led to (whether it counted, the delivery's status after it); a success recorded
        # on its delivery has none (_on_delivery).
        insert_rows(
            DeliveryAttempt,
            ATTEMPT_COLUMNS,
            [
                (*r.row, r.decision.charged, r.decision.status)
                for r in records
                if r.row.delivery_id in applied and not _on_delivery(r)
            ],
        )
        concluding()
    return set(applied)


def _on_delivery(record: AttemptRecord) -> bool:
    """Whether the attempt is a success, recorded on its delivery with no attempt row.

    Most sends are: the delivery's columns then hold the whole attempt (delivery.selectors.delivery_attempts
    shows it from them), which saves the row, its index entries and its foreign key's check. A success
    has no error text (delivery.receivers.transport); one that had would keep a row, where that is kept.
    """
    return record.decision.status == DeliveryStatus.DELIVERED and not record.row.error


def _by_move(*, records: Sequence[AttemptRecord]) -> dict[tuple[str, bool, bool], list[AttemptRecord]]:
    """The records by the one UPDATE that moves their deliveries: (status, charged, keeps due)."""
    by_move: dict[tuple[str, bool, bool], list[AttemptRecord]] = {}
    for record in records:
        key = (record.decision.status, record.decision.charged, record.decision.delay is None)
        by_move.setdefault(key, []).append(record)
    return by_move


def _start_deliveries_move(
    *,
    records: list[AttemptRecord],
    status: str,
    charged: bool,
    keeps_due: bool,
    now: datetime,
    held_by: str | None,
    expired_before: datetime | None,
) -> Callable[[], list[tuple[Any, ...]]]:
    """Send the move of the records' deliveries still under the lease to `status`; the function returned waits for
    (id, event id) of each moved."""
    values: dict[str, list[Any]] = {
        "last_status_code": [r.row.status_code for r in records],
        "last_error": [r.decision.reason for r in records],
    }
    changes = {}
    if not charged:
        # Waited on the endpoint: the attempt is logged but not counted against the budget.
        values["max_attempts"] = [r.max_attempts + 1 for r in records]
    if status != DeliveryStatus.QUEUED:
        changes["next_attempt_at"] = now
    elif not keeps_due:
        # Each has a delay: the records are grouped by whether theirs is None (_by_move).
        values["next_attempt_at"] = [now + r.decision.delay for r in records if r.decision.delay is not None]
    if status == DeliveryStatus.DELIVERED:
        # When the receiver accepted it; a success recorded on the delivery keeps its attempt's start, worker and
        # duration beside it (Delivery.delivered_duration_ms), one with a row of its own clears them.
        on_delivery = [_on_delivery(r) for r in records]
        values["delivered_at"] = [r.row.finished_at for r in records]
        values["attempt_started_at"] = [r.row.started_at for r in records]
        values["delivered_by"] = [
            r.row.worker if kept else "" for r, kept in zip(records, on_delivery, strict=True)
        ]
        values["delivered_duration_ms"] = [
            r.row.duration_ms if kept else None for r, kept in zip(records, on_delivery, strict=True)
        ]
        values["delivered_response"] = [
            r.row.response_excerpt if kept else "" for r, kept in zip(records, on_delivery, strict=True)
        ]
    return start_deliveries_transition(
        source=DeliveryStatus.SENDING,
        target=status,
        select=Rows(
            ids=[r.row.delivery_id for r in records],
            attempts=[r.row.number for r in records],
            held_by=held_by,
            expired_before=expired_before,
            values=values,
        ),
        now=now,
        changes=changes,
        returning=("id", "event_id"),
    )


def deliveries_record(
    *, worker: str, results: Sequence[SendResult], healthy: Collection[str] = ()
) -> RecordSummary:
    """Write down a batch of attempts and apply their outcomes, in one short transaction.

    `healthy` names the endpoints this worker last saw HEALTHY with no failure
    counted: for those, a batch of successes only moves the last success
    forward (after the deliveries, so the endpoint's row is locked for the
    shortest time); anything else is weighed by the endpoint's health first.
    """
    if not results:
        return RecordSummary()
    policy = RetryPolicy.from_settings()
    now = timezone.now()
    weighing = _Weighing(
        # Each answer's description, said once: the decision and the endpoint's health both quote it.
        descriptions={id(r): r.describe() for r in results},
        now=now,
        policy=HealthPolicy.from_settings(retry=policy),
    )
    by_key = _by_endpoint(results=results)
    with transaction.atomic():
        verdicts = weighing.verdicts(by_key=by_key, healthy=healthy)
        records = _records(
            results=results, worker=worker, weighing=weighing, verdicts=verdicts, policy=policy
        )
        with pipeline():
            applied = attempts_apply(
                records=records,
                now=now,
                held_by=worker,
                events={r.delivery.id: r.delivery.event_id for r in results},
            )
            noted = {
                key: endpoint_note_success(key=key, at=max(r.finished_at for r in by_key[key]))
                for key, verdict in verdicts.items()
                if verdict is None
            }
        # An address a relay refused for good (a 5xx at RCPT): nothing more is mailed to it.
        # One check of a batch's results, a query only for such an answer.
        for result in results:
            if result.undeliverable:
                _address_undeliverable_mark(result, now=now)
        for key, as_seen in noted.items():
            if not as_seen():
                # Another worker counted failures here since this one last looked: weigh the successes.
                verdicts[key] = weighing.weigh(key, by_key[key], _signals(by_key[key]))
    return _summary(results=results, records=records, applied=applied, verdicts=verdicts)


def _address_undeliverable_mark(result: SendResult, *, now: datetime) -> None:
    """Mark the recipient's address undeliverable, if it is still theirs (users.services)."""
    user_id = result.delivery.user_id
    if not user_id:
        return  # an address of a destination's own (an HR mailbox): its operator sees the dead delivery
    recipient_email_undeliverable_mark(
        email=result.undeliverable,
        user_id=uuid.UUID(user_id),
        reason=f"Refused by the mail relay: {result.describe()}",
        now=now,
    )


def _by_endpoint(*, results: Sequence[SendResult]) -> dict[str, list[SendResult]]:
    """The results by their endpoint's key, the keys in order."""
    by_key: dict[str, list[SendResult]] = {}
    # Endpoint rows are written in key order, never in the order the answers came back: two
    # workers recording answers from the same endpoints would otherwise lock their rows in
    # opposite orders and deadlock (seen with three destinations and two workers).
    for result in sorted(results, key=lambda r: r.delivery.endpoint_key):
        by_key.setdefault(result.delivery.endpoint_key, []).append(result)
    return by_key


@dataclass
class _Weighing:
    """A batch's answers as the endpoints' health weighs them, for the endpoints it weighs only."""

    descriptions: dict[int, str]
    now: datetime
    policy: HealthPolicy
    # Each weighed answer by id(result): a batch of successes from an endpoint last seen
    # healthy needs none (the usual batch at a 0 ms receiver).
    answers: dict[int, Answer] = field(default_factory=dict)

    def verdicts(
        self, *, by_key: dict[str, list[SendResult]], healthy: Collection[str]
    ) -> dict[str, Verdict | None]:
        """Each endpoint's health after its answers; None for one last seen healthy that answered with successes only."""
        verdicts: dict[str, Verdict | None] = {}
        for key, group in by_key.items():
            signals = _signals(group)
            quiet = key in healthy and all(signal == Signal.SUCCESS for signal in signals)
            verdicts[key] = None if quiet else self.weigh(key, group, signals)
        return verdicts

    def weigh(self, key: str, group: list[SendResult], signals: list[Signal]) -> Verdict:
        """The endpoint's health after `group`, its answers in this batch (`signals`, theirs); each answer made is
        kept in `answers`."""
        for r, signal in zip(group, signals, strict=True):
            self.answers[id(r)] = Answer(
                signal=signal,
                started_at=r.started_at,
                finished_at=r.finished_at,
                description=self.descriptions[id(r)],
                retry_after=r.retry_after,
                probe=r.delivery.probe,
            )
        return endpoint_record_answers(
            key=key, answers=[self.answers[id(r)] for r in group], now=self.now, policy=self.policy
        )


def _signals(group: list[SendResult]) -> list[Signal]:
    """What each answer says about its endpoint, as its transport read it (delivery.receivers.protocol)."""
    return [r.signal for r in group]


def _records(
    *,
    results: Sequence[SendResult],
    worker: str,
    weighing: _Weighing,
    verdicts: Mapping[str, Verdict | None],
    policy: RetryPolicy,
) -> list[AttemptRecord]:
    """Each result as its attempt's record, with the decision it leads to."""
    # Read once a batch, not once a row: each read through Django's lazy settings goes through its __getattr__.
    lateness = settings.EVENT_MAX_LATENESS
    descriptions, answers = weighing.descriptions, weighing.answers
    return [
        _record(
            r,
            worker,
            descriptions[id(r)],
            answers.get(id(r)),
            verdicts[r.delivery.endpoint_key],
            policy,
            lateness,
        )
        for r in results
    ]


def _record(
    result: SendResult,
    worker: str,
    description: str,
    answer: Answer | None,
    verdict: Verdict | None,
    policy: RetryPolicy,
    lateness: timedelta,
) -> AttemptRecord:
    return AttemptRecord(
        # By position, in the fields' order: one row per answer, and keywords cost more.
        AttemptLogRow(
            result.delivery.id,
            result.delivery.attempt,
            worker,
            result.started_at,
            result.finished_at,
            result.duration_ms,
            result.outcome,
            result.status_code,
            # The attempt's row keeps the receiver's own words: the erase strips them there.
            result.detail or result.error,
            result.response_excerpt,
        ),
        max_attempts=result.delivery.max_attempts,
        decision=decide(
            outcome=result.outcome,
            attempt=result.delivery.attempt,
            max_attempts=result.delivery.max_attempts,
            description=description,
            signal=result.signal,
            retry_after=result.retry_after,
            endpoint_down=verdict is not None and verdict.down,
            # A verdict was weighed from the answers, this one's among them (_Weighing.weigh).
            refused_by_message=verdict is not None
            and answer is not None
            and verdict.health.refused_by_message(answer),
            outlived=_outlived(result, lateness),
            policy=policy,
        ),
    )


def _outlived(result: SendResult, lateness: timedelta) -> timedelta | None:
    """`lateness` (EVENT_MAX_LATENESS) if the delivery was queued longer ago than that when this attempt ended."""
    queued_at = result.delivery.queued_at
    return lateness if queued_at is not None and result.finished_at - queued_at >= lateness else None


def _summary(
    *,
    results: Sequence[SendResult],
    records: Sequence[AttemptRecord],
    applied: Collection[uuid.UUID],
    verdicts: Mapping[str, Verdict | None],
) -> RecordSummary:
    """The batch's outcomes counted, with a log line for each delivery."""
    summary = RecordSummary(
        verdicts={key: verdict.health for key, verdict in verdicts.items() if verdict is not None}
    )
    # A line per delivery, its fields built only where the line is written: the delivered
    # one is INFO, below the worker's usual level, and a batch has hundreds of them.
    delivered_logged = logger.isEnabledFor(logging.INFO)
    for result, record in zip(results, records, strict=True):
        if record.row.delivery_id not in applied:
            summary.lease_lost += 1
            logger.warning(
                "Lease lost before the outcome was recorded; another worker owns the delivery now, or its "
                "recipient was erased",
                extra=_log_fields(result),
            )
        elif record.decision.status == DeliveryStatus.DELIVERED:
            summary.delivered += 1
            if delivered_logged:
                logger.info("Delivery attempt delivered", extra=_log_fields(result))
        elif not record.decision.charged:
            summary.waiting += 1
            logger.warning(
                "Delivery attempt waits for the endpoint (attempt not counted)", extra=_log_fields(result)
            )
        elif record.decision.status == DeliveryStatus.QUEUED:
            summary.retrying += 1
            logger.warning("Delivery attempt retrying", extra=_log_fields(result))
        else:
            summary.dead += 1
            logger.warning("Delivery attempt dead", extra=_log_fields(result))
    return summary


def _log_fields(result: SendResult) -> dict[str, Any]:
    fields = {
        # None for a digest's delivery, which names no one event.
        "event_id": str(result.delivery.event_id) if result.delivery.event_id else None,
        "idempotency_key": result.delivery.idempotency_key,
        "attempt": result.delivery.attempt,
        "status": result.status_code,
        "duration_ms": result.duration_ms,
        "error": result.error or None,
        "outcome": AttemptOutcome(result.outcome).label,
    }
    # Only the standard format's body names the recipient; a chat format's does not, and a line
    # saying user_id=None reads as a delivery for no one. The event id finds them either way.
    user_id = result.delivery.user_id
    if user_id is not None:
        fields["user_id"] = user_id
    return fields
