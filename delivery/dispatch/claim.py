"""The scheduler's claim: due events become queued deliveries, a batch per transaction.

Per batch, on PostgreSQL: one SELECT locks the due events (FOR UPDATE SKIP
LOCKED, so schedulers share the work without waiting on each other) and
returns what Python needs as tuples, the recipients' send times and pauses
from the user row it joins; three small SELECTs read the message templates,
the event types' pauses and the enabled destinations. Each occurrence gets one
delivery per destination subscribed to its type, rendered in that destination's
format, all under the occurrence's one idempotency key, to each destination
whose audience holds its recipient (delivery.destinations.audience, from the labels the
claim's SELECT reads with the recipient). Then, in one pipeline
(runtime.sql.pipeline), one UPDATE moves the events to PROCESSING (and one more
moves the rare too-late and paused ones to FAILED, one those no destination
wants, by type or by audience, to COMPLETED)
while Python computes the next occurrences; one INSERT writes every claimed
recipient's next occurrence while Python renders the messages, and one their
deliveries; the moves are checked once their results are back. The
messages and the next occurrences are computed in Python, by the event-type
handlers and zoneinfo, so PostgreSQL's own time-zone data never decides a
send time.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from delivery.destinations.audience import DestinationRouter
from delivery.destinations.mentions import mention_for, recipients_mentions
from delivery.destinations.services import destinations_for_queueing
from delivery.dispatch.payload import email_payload, message_overrides, webhook_payload
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationFormat, DestinationOptOut
from kinds import Mention, kind_for
from runtime.ids import uuid7
from runtime.sql import execute, insert_rows, pipeline
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.celebration import DEFAULT_VISIBILITY, NOT_CELEBRATED, Visibility
from scheduling.handlers import RecipientRow
from scheduling.models import CelebrationDefault, Event, EventStatus
from scheduling.pauses import EVENT_TYPE_PAUSED, RECIPIENT_PAUSED, PauseSpan
from scheduling.selectors import MessageTemplates, event_type_pauses, message_templates
from scheduling.services.occurrences import (
    PendingEventRow,
    next_occurrence,
    pending_event_defaults,
    pending_event_row,
)
from scheduling.services.transitions import Actor, EventRef, start_events_transition
from users.models import CelebrationChoice, User

logger = logging.getLogger(__name__)

NO_DESTINATION_REASON = "Nothing sent: no enabled destination subscribes to {type} events."
# Only digest destinations want it: their daily digest names the occurrence (delivery.dispatch.digests).
DIGEST_ONLY_REASON = "Nothing sent on its own: named in the daily digest of {names}."
PRIVATE_REASON = (
    "Nothing sent: celebrated privately, and no enabled destination subscribed to {type} events "
    "reaches the person alone."
)
OPTED_OUT_REASON = "Nothing sent: the recipient opted out of every destination that would have greeted them."
NO_ADDRESS_REASON = "Nothing sent: the recipient has no email address, and every destination left mails it."
UNDELIVERABLE_REASON = (
    "Nothing sent: the recipient's email address is marked undeliverable ({reason}), and every destination "
    "left mails it."
)
NO_AUDIENCE_REASON = (
    "Nothing sent: no enabled destination subscribed to {type} events has this recipient in its "
    "audience (labels: {labels})."
)


@dataclass(frozen=True)
class EnqueueResult:
    queued: int = 0
    too_late: int = 0
    # Held back by a pause of their recipient or of their type, or their person not celebrated:
    # FAILED, never sent.
    paused: int = 0
    # Claimed with no enabled destination subscribed to their type, or none whose audience
    # holds their recipient: COMPLETED, nothing sent.
    unsubscribed: int = 0

    @property
    def claimed(self) -> int:
        return self.queued + self.too_late + self.paused + self.unsubscribed


class ClaimedEvent(NamedTuple):
    """A claimed event and its recipient, as the claim's SELECT returns them.

    Each field but the recipient's (the recipient, their pause, labels, language and visibility)
    names the event's column it holds.
    """

    id: uuid.UUID
    version: int
    event_type: str
    occurrence_date: date
    target_timestamp_utc: datetime
    idempotency_key: str
    recipient: RecipientRow
    pause: PauseSpan
    # The recipient's, sorted (scheduling.labels.clean_labels): whom destinations' audiences take.
    labels: list[str]
    language: str
    # The visibility in force for this occurrence (scheduling.celebration): the person's own
    # choice, else the company default of the type, else public; read in the claim's SELECT.
    visibility: str
    # The destinations the person opted out of (delivery.models.DestinationOptOut); None: none.
    opted_out: list[int] | None

    @property
    def private(self) -> bool:
        return self.visibility == Visibility.PRIVATE


_E = {f.name: f for f in Event._meta.concrete_fields}
_U = {f.name: f for f in User._meta.concrete_fields}
_EVENT_FIELDS = [_E[name] for name in ClaimedEvent._fields[: ClaimedEvent._fields.index("recipient")]]
# Every recipient field a handler may read, by RecipientRow's names: an event
# type whose handler reads another field adds it there, not here.
_RECIPIENT_FIELDS = [_U[name] for name in RecipientRow._fields]
# Whether the recipient's greetings are held back, from the same row (scheduling.pauses).
_PAUSE_FIELDS = [_U[name] for name in PauseSpan._fields]
# Whom the recipient's greetings go to (delivery.destinations.audience) and in which words.
_AUDIENCE_FIELDS = [_U["labels"], _U["language"]]


class QueuedDeliveryRow(NamedTuple):
    """A new delivery's own values, for set-based inserts: its fields are the columns written.

    What every new delivery shares is in queued_delivery_defaults.
    """

    id: uuid.UUID
    event_id: uuid.UUID
    destination_id: int
    endpoint_key: str
    idempotency_key: str
    payload: dict[str, Any]


def queued_delivery_row(
    *,
    event_id: uuid.UUID,
    destination: Destination,
    idempotency_key: str,
    payload: dict[str, Any],
    mention: Mention | None = None,
) -> QueuedDeliveryRow:
    """A new delivery of the event's standard `payload` to `destination`, in its format, as a row to insert;
    mentioning `mention`'s person (delivery.destinations.mentions decides whom)."""
    # By position, in the fields' order: one call per row of a batch, and keywords cost more.
    return QueuedDeliveryRow(
        uuid7(),
        event_id,
        destination.pk,
        destination.url_key,
        idempotency_key,
        kind_for(destination.format).body(payload, mention=mention),
    )


def queued_delivery_defaults(*, now: datetime) -> dict[str, Any]:
    """What every new delivery shares: due now, with a full budget of attempts."""
    return {
        "status": DeliveryStatus.QUEUED.value,
        "attempts": 0,
        "max_attempts": settings.DELIVERY_MAX_ATTEMPTS,
        "next_attempt_at": now,
        "locked_by": "",
        "last_error": "",
        "created_at": now,
        "updated_at": now,
    }


def deliveries_enqueue_due(*, now: datetime | None = None, batch_size: int = 500) -> EnqueueResult:
    """Claim up to `batch_size` due PENDING events and queue their deliveries, in one transaction.

    Events held back by a pause (of their recipient, or of their type) and
    events overdue by more than EVENT_MAX_LATENESS are FAILED instead of sent,
    each with its reason. Every claimed recipient gets their next occurrence
    as the new PENDING event.
    """
    now = now or timezone.now()
    with transaction.atomic():
        claimed = _due_events_lock(now=now, batch_size=batch_size)
        if not claimed:
            return EnqueueResult()
        # Once per batch, in the batch's transaction, as the templates below: a
        # pause applies to every event claimed after it was saved.
        held_back = _held_back(events=claimed, type_pauses=event_type_pauses())
        on_time, too_late = _split_by_lateness(events=[e for e in claimed if e.id not in held_back], now=now)
        # Once per batch, in the batch's transaction: an operator's change
        # applies to every event claimed after it was saved, and to none queued before.
        templates = message_templates()
        router = DestinationRouter(destinations_for_queueing())
        # A personal email destination mails no one without a usable address (one query, none without one).
        on_time, addresses, unmailable = _addresses_applied(events=on_time, router=router)
        on_time, unsubscribed = _split_by_subscription(events=on_time, router=router)
        # In a pipeline: PostgreSQL moves the events while Python computes the
        # next occurrences, and inserts those while Python renders the messages,
        # so each side works while the other would have waited. The next
        # occurrences' INSERT is the costliest statement, hence sent before the
        # rendering rather than after it.
        with pipeline():
            moved_to_processing = _start_move(events=on_time, target=EventStatus.PROCESSING, now=now)
            moved_to_failed = _start_move_to_failed(
                too_late=too_late, held_back=held_back, claimed=claimed, now=now
            )
            moved_to_completed = _start_move_to_completed(
                events=unsubscribed, router=router, now=now, unmailable=unmailable
            )
            _next_pending_events_insert(claimed=claimed, now=now)
            _deliveries_insert(
                events=on_time, templates=templates, router=router, now=now, addresses=addresses
            )
            # Every claimed row is locked by this transaction, so the moves
            # succeed; were one ever refused, OptimisticLockError rolls all back.
            moved_to_processing()
            moved_to_failed()
            moved_to_completed()
    _too_late_log(events=too_late)
    _held_back_log(held_back=held_back)
    return EnqueueResult(
        queued=len(on_time), too_late=len(too_late), paused=len(held_back), unsubscribed=len(unsubscribed)
    )


def _addresses_applied(
    *, events: list[ClaimedEvent], router: DestinationRouter
) -> tuple[list[ClaimedEvent], dict[uuid.UUID, str] | None, dict[uuid.UUID, str]]:
    """The events, each whose recipient has no address a personal email destination may mail (none, or one
    marked undeliverable) with those destinations among the ones it leaves out; each recipient's address
    by id (None while no personal email destination exists: no query); why each such event is not mailed."""
    mailing = [d.pk for d in router.destinations if d.mails_the_person]
    if not mailing or not events:
        return events, None, {}
    rows = User.objects.filter(id__in={event.recipient.id for event in events}).values_list(
        "id", "email", "email_undeliverable_at", "email_undeliverable_reason"
    )
    addresses, unusable = {}, {}
    for user_id, address, undeliverable_at, reason in rows:
        if not address:
            unusable[user_id] = NO_ADDRESS_REASON
        elif undeliverable_at is not None:
            unusable[user_id] = UNDELIVERABLE_REASON.format(reason=reason or "refused")
        else:
            addresses[user_id] = address
    if not unusable:
        return events, addresses, {}
    applied, unmailable = [], {}
    for event in events:
        why = unusable.get(event.recipient.id)
        if why is not None:
            unmailable[event.id] = why
            event = event._replace(opted_out=[*(event.opted_out or ()), *mailing])
        applied.append(event)
    return applied, addresses, unmailable


def _split_by_subscription(
    *, events: list[ClaimedEvent], router: DestinationRouter
) -> tuple[list[ClaimedEvent], list[ClaimedEvent]]:
    """The events some destination receives, and those no enabled destination wants (by type or audience)."""
    sendable: list[ClaimedEvent] = []
    unsubscribed: list[ClaimedEvent] = []
    for event in events:
        (
            sendable
            if router.targets(
                event_type=event.event_type,
                labels=event.labels,
                private=event.private,
                opted_out=event.opted_out,
            )
            else unsubscribed
        ).append(event)
    return sendable, unsubscribed


def _due_events_lock(*, now: datetime, batch_size: int) -> list[ClaimedEvent]:
    """Lock up to `batch_size` due PENDING events, soonest first, skipping those other schedulers hold."""
    rows = execute(
        _claim_sql(),
        [EventStatus.PENDING, _E["target_timestamp_utc"].get_db_prep_value(now, connection), batch_size],
        binary=True,
    )
    split = len(_EVENT_FIELDS)
    pause = split + len(_RECIPIENT_FIELDS)
    audience = pause + len(_PAUSE_FIELDS)
    return [
        ClaimedEvent._make(
            (
                *row[:split],
                RecipientRow._make(row[split:pause]),
                PauseSpan._make(row[pause:audience]),
                *row[audience:],
            )
        )
        for row in rows
    ]


def _claim_sql() -> str:
    event, user = Event._meta.db_table, User._meta.db_table
    columns = [f"e.{field.column}" for field in _EVENT_FIELDS]
    columns += [f"u.{field.column}" for field in _RECIPIENT_FIELDS + _PAUSE_FIELDS + _AUDIENCE_FIELDS]
    choice, default = CelebrationChoice._meta.db_table, CelebrationDefault._meta.db_table
    columns.append(f"COALESCE(c.visibility, d.visibility, '{DEFAULT_VISIBILITY.value}')")
    # Through the opt-outs' unique (user, destination) index: one probe per claimed event, NULL for
    # most. Read under the same share lock of the person as their choices, for the same reason.
    columns.append(
        f"(SELECT array_agg(o.destination_id) FROM {DestinationOptOut._meta.db_table} o WHERE o.user_id = e.user_id)"
    )
    # The person's choice through its unique (user, type) index, the company's from its few rows.
    # The recipient's row is share-locked: a change of their choices (users.services, which locks
    # it FOR UPDATE) waits for this claim to commit and then withdraws what it queued, and a claim
    # skips, for a moment, the recipient whose change is being written.
    return (
        f"SELECT {', '.join(columns)} FROM {event} e JOIN {user} u ON u.id = e.user_id "
        f"LEFT JOIN {choice} c ON c.user_id = e.user_id AND c.event_type = e.event_type "
        f"LEFT JOIN {default} d ON d.event_type = e.event_type "
        "WHERE e.status = %s AND e.target_timestamp_utc <= %s "
        "ORDER BY e.target_timestamp_utc LIMIT %s FOR UPDATE OF e SKIP LOCKED FOR SHARE OF u SKIP LOCKED"
    )


def _held_back(*, events: list[ClaimedEvent], type_pauses: Mapping[str, PauseSpan]) -> dict[uuid.UUID, str]:
    """The events a pause holds back (scheduling.pauses), or whose person is not celebrated
    (scheduling.celebration), each with its reason."""
    held_back = {}
    for event in events:
        reason = held_back_reason(
            pause=event.pause,
            type_pause=type_pauses.get(event.event_type),
            target=event.target_timestamp_utc,
            visibility=event.visibility,
        )
        if reason is not None:
            held_back[event.id] = reason
    return held_back


def held_back_reason(
    *, pause: PauseSpan, type_pause: PauseSpan | None, target: datetime, visibility: str
) -> str | None:
    """Why the claim holds back an occurrence due at `target` (its failure reason), the recipient's pause
    first; None: it is not held back. The claim's rule, read too by what foretells it (delivery.upcoming)."""
    if pause.holds(target):
        return RECIPIENT_PAUSED
    if type_pause is not None and type_pause.holds(target):
        return EVENT_TYPE_PAUSED
    if visibility == Visibility.NONE:
        return NOT_CELEBRATED
    return None


def _split_by_lateness(
    *, events: list[ClaimedEvent], now: datetime
) -> tuple[list[ClaimedEvent], list[ClaimedEvent]]:
    """The events still to send, and those overdue by more than EVENT_MAX_LATENESS."""
    max_lateness = settings.EVENT_MAX_LATENESS
    on_time: list[ClaimedEvent] = []
    too_late: list[ClaimedEvent] = []
    for event in events:
        (on_time if now - event.target_timestamp_utc <= max_lateness else too_late).append(event)
    return on_time, too_late


def _start_move(
    *,
    events: list[ClaimedEvent],
    target: str,
    now: datetime,
    changes: Mapping[str, Any] | None = None,
    per_event: Mapping[str, Sequence[Any]] | None = None,
) -> Callable[[], list[uuid.UUID]]:
    """Send the UPDATE that moves the claimed `events` from PENDING to `target`; the function returned checks it."""
    return start_events_transition(
        events=[EventRef(event.id, event.version) for event in events],
        source=EventStatus.PENDING,
        target=target,
        actor=Actor.SCHEDULER,
        now=now,
        changes=changes,
        per_event=per_event,
    )


def _start_move_to_failed(
    *,
    too_late: list[ClaimedEvent],
    held_back: Mapping[uuid.UUID, str],
    claimed: list[ClaimedEvent],
    now: datetime,
) -> Callable[[], list[uuid.UUID]]:
    """Send the one UPDATE that fails the held-back and the too-late events, each with its reason; the function
    returned checks it."""
    max_lateness = settings.EVENT_MAX_LATENESS
    failing = [event for event in claimed if event.id in held_back] + too_late
    reasons = [held_back[event.id] for event in claimed if event.id in held_back] + [
        f"Not sent: {_hours(now - event.target_timestamp_utc)} late, "
        f"more than EVENT_MAX_LATENESS ({_hours(max_lateness)})."
        for event in too_late
    ]
    return _start_move(
        events=failing, target=EventStatus.FAILED, now=now, per_event={"failure_reason": reasons}
    )


def _start_move_to_completed(
    *,
    events: list[ClaimedEvent],
    router: DestinationRouter,
    now: datetime,
    unmailable: Mapping[uuid.UUID, str] | None = None,
) -> Callable[[], list[uuid.UUID]]:
    """Send the UPDATE that completes the events nobody receives; the function returned checks it.

    Nothing to send is not a failure (an operator chose which types and whom
    each destination receives), so COMPLETED, with the reason saying why nothing went out.
    """
    return _start_move(
        events=events,
        target=EventStatus.COMPLETED,
        now=now,
        changes={"executed_at": now},
        per_event={
            "failure_reason": [
                (unmailable or {}).get(event.id) or _nobody_wants_reason(event=event, router=router)
                for event in events
            ]
        },
    )


def _nobody_wants_reason(*, event: ClaimedEvent, router: DestinationRouter) -> str:
    if event.opted_out and router.targets(
        event_type=event.event_type, labels=event.labels, private=event.private
    ):
        return OPTED_OUT_REASON
    if event.private and router.subscribed(event.event_type):
        return PRIVATE_REASON.format(type=event.event_type)
    digests = router.digests_naming(event_type=event.event_type, labels=event.labels)
    if digests:
        return DIGEST_ONLY_REASON.format(names=", ".join(d.name for d in digests))
    if not router.subscribed(event.event_type):
        return NO_DESTINATION_REASON.format(type=event.event_type)
    return NO_AUDIENCE_REASON.format(type=event.event_type, labels=", ".join(event.labels) or "none")


def _hours(delta: timedelta) -> str:
    return f"{delta.total_seconds() / 3600:.1f} h"


def _next_pending_events_insert(*, claimed: list[ClaimedEvent], now: datetime) -> None:
    """Send the INSERT of each claimed recipient's next occurrence as a new PENDING event."""
    # Before the messages are rendered, and this INSERT (the batch's costliest
    # statement: five index entries a row) sent as soon as they are known, so
    # PostgreSQL runs it while Python renders them; sent after the claimed
    # events' moves, so they are no longer PENDING when their next ones arrive.
    upcoming = _next_pending_events(claimed=claimed, now=now)
    # A next occurrence may already exist (a recipient's edit or the
    # reconcile created it between our lock and this insert): that row stands.
    insert_rows(
        Event,
        PendingEventRow._fields,
        upcoming,
        same_for_all=pending_event_defaults(now=now),
        ignore_conflicts=True,
    )


def _next_pending_events(*, claimed: list[ClaimedEvent], now: datetime) -> list[PendingEventRow]:
    """Each claimed recipient's next occurrence of the event's type, as a new PENDING event."""
    upcoming = []
    for event in claimed:
        recipient = event.recipient
        # After the occurrence just claimed: every path that creates a PENDING
        # event puts it after the user's last handled one, so nothing handled
        # comes later. Were that ever broken, their insert would meet
        # the unique (user, type, date) key and skip the row, and the
        # scheduler's reconcile (which reads the history) gives the user
        # their next event within SCHEDULER_RECONCILE_INTERVAL.
        occurrence = next_occurrence(
            recipient=recipient, event_type=event.event_type, now=now, after_date=event.occurrence_date
        )
        # None: the recipient has no occurrence of this type any more, so no next one.
        if occurrence is not None:
            upcoming.append(
                pending_event_row(user_id=recipient.id, event_type=event.event_type, occurrence=occurrence)
            )
    return upcoming


def _deliveries_insert(
    *,
    events: list[ClaimedEvent],
    templates: MessageTemplates,
    router: DestinationRouter,
    now: datetime,
    addresses: Mapping[uuid.UUID, str] | None = None,
) -> None:
    """Send the INSERT of the events' deliveries, rendered (_rendered_deliveries); wake the workers if any."""
    deliveries = _rendered_deliveries(events=events, templates=templates, router=router, addresses=addresses)
    insert_rows(
        Delivery,
        QueuedDeliveryRow._fields,
        deliveries,
        same_for_all=queued_delivery_defaults(now=now),
    )
    if deliveries:
        notify(WORKER_CHANNEL)


def _rendered_deliveries(
    *,
    events: list[ClaimedEvent],
    templates: MessageTemplates,
    router: DestinationRouter,
    addresses: Mapping[uuid.UUID, str] | None = None,
) -> list[QueuedDeliveryRow]:
    """A delivery for each event and destination that wants it.

    The message is rendered once per event in the recipient's language, and once more for
    each destination with a text of its own for the type (message_overrides). A destination
    that mentions mentions the recipient where they agreed (one query a batch, none while no
    destination mentions). An email destination's payload also has the subject, and a personal
    one's the recipient's address (`addresses`, read by _addresses_applied).
    """
    overrides = message_overrides(destinations=router.destinations)
    mailers = {d.pk for d in router.destinations if d.format == DestinationFormat.EMAIL}
    mentions = recipients_mentions(
        user_ids=[event.recipient.id for event in events], destinations=router.destinations
    )
    rows = []
    for event in events:
        payloads: dict[str | None, dict[str, Any]] = {}
        for destination in router.targets(
            event_type=event.event_type, labels=event.labels, private=event.private, opted_out=event.opted_out
        ):
            override = overrides.get((destination.pk, event.event_type)) if overrides else None
            payload = payloads.get(override)
            if payload is None:
                payload = payloads[override] = webhook_payload(
                    occurrence=event,
                    recipient=event.recipient,
                    templates=templates,
                    language=event.language,
                    override=override,
                )
            if mailers and destination.pk in mailers:
                payload = email_payload(
                    payload,
                    occurrence=event,
                    recipient=event.recipient,
                    templates=templates,
                    language=event.language,
                    address=(addresses or {}).get(event.recipient.id, "") if destination.personal else "",
                )
            rows.append(
                queued_delivery_row(
                    event_id=event.id,
                    destination=destination,
                    idempotency_key=event.idempotency_key,
                    payload=payload,
                    mention=mention_for(
                        mentions=mentions, destination=destination, user_id=event.recipient.id
                    )
                    if mentions
                    else None,
                )
            )
    return rows


def _held_back_log(*, held_back: Mapping[uuid.UUID, str]) -> None:
    # One line a reason and batch: a paused event type holds back thousands at 09:00.
    for reason in sorted(set(held_back.values())):
        ids = [str(event_id) for event_id, why in held_back.items() if why == reason]
        logger.info("%s event(s) not sent, FAILED: %s", len(ids), reason, extra={"event_ids": ids[:20]})


def _too_late_log(*, events: list[ClaimedEvent]) -> None:
    for event in events:
        logger.warning(
            "Event too late to send; marked FAILED",
            extra={
                "event_id": str(event.id),
                "user_id": str(event.recipient.id),
                "idempotency_key": event.idempotency_key,
                "target": event.target_timestamp_utc.isoformat(),
            },
        )
