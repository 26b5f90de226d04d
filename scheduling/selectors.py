"""Reads of events, for the API, the console and the scheduler."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Protocol

from django.db import connection
from django.db.models import Count, Max, Min, QuerySet
from django.db.models.functions import TruncHour

from runtime.aggregates import counts_by, estimated_counts_by, estimated_index_entries
from scheduling.handlers import REGISTRY, Recipient, get_handler
from scheduling.languages import language_fallbacks
from scheduling.messages import placeholders_used, template_errors, years_counted
from scheduling.models import (
    PENDING_DUE_INDEX,
    CelebrationDefault,
    DeletedRecipientOccurrence,
    Event,
    EventStatus,
    EventTypePause,
    EventZoneData,
    MessageTemplate,
)
from scheduling.pauses import EVENT_TYPE_PAUSED, RECIPIENT_PAUSED, PauseSpan

logger = logging.getLogger(__name__)


def event_list_for_user(*, user_id: uuid.UUID) -> QuerySet[Event]:
    """A user's events, newest occurrence first."""
    return Event.objects.filter(user_id=user_id).order_by("-occurrence_date", "-created_at")


def deleted_occurrence_latest(*, external_id: str, event_type: str, now: datetime) -> date | None:
    """The latest occurrence of the type handled for a deleted recipient who had this external id, still remembered."""
    latest: date | None = DeletedRecipientOccurrence.objects.filter(
        recipient_digest=DeletedRecipientOccurrence.digest_of(external_id),
        event_type=event_type,
        expires_at__gt=now,
    ).aggregate(latest=Max("occurrence_date"))["latest"]
    return latest


def deleted_occurrences_latest(
    *, external_ids: Collection[str], now: datetime
) -> dict[tuple[str, str], date]:
    """deleted_occurrence_latest for many external ids at once, by (external id, event type); absent: none.

    One query, and none at all (nor a digest computed) while nothing is
    remembered, which is nearly always: a bulk import pays for this only
    within a couple of days of a deletion.
    """
    remembered = DeletedRecipientOccurrence.objects.filter(expires_at__gt=now)
    if not external_ids or not remembered.exists():
        return {}
    by_digest = {
        DeletedRecipientOccurrence.digest_of(external_id): external_id for external_id in external_ids
    }
    rows = (
        remembered.filter(recipient_digest__in=list(by_digest))
        .values("recipient_digest", "event_type")
        .annotate(latest=Max("occurrence_date"))
        .order_by()
        .values_list("recipient_digest", "event_type", "latest")
    )
    return {(by_digest[digest], event_type): latest for digest, event_type, latest in rows}


def event_type_pauses() -> dict[str, PauseSpan]:
    """The pause of every event type ever paused, in one query (the scheduler reads it once per claim batch)."""
    return {
        event_type: PauseSpan(paused_at, resumed_at)
        for event_type, paused_at, resumed_at in EventTypePause.objects.filter(
            paused_at__isnull=False
        ).values_list("event_type", "paused_at", "resumed_at")
    }


def celebration_defaults() -> dict[str, str]:
    """The company's visibility of each event type that has one (a type absent: public), in one query.

    The scheduler reads it once per claim batch, as the pauses: a change applies to every
    event claimed after it is saved.
    """
    return dict(CelebrationDefault.objects.values_list("event_type", "visibility"))


def events_held_back_counts(*, since: datetime) -> dict[str, int]:
    """Events failed unsent because their recipient or their type was paused, whose send time is after `since`.

    By reason ("recipient paused", "event type paused"; both present). A range of
    event_history_idx (FAILED, target time), so only what failed lately is read.
    """
    held_back = Event.objects.filter(
        status=EventStatus.FAILED,
        target_timestamp_utc__gt=since,
        failure_reason__in=(RECIPIENT_PAUSED, EVENT_TYPE_PAUSED),
    )
    return counts_by(held_back, field="failure_reason", keys=(RECIPIENT_PAUSED, EVENT_TYPE_PAUSED))


def next_pending_target(*, after: datetime | None = None) -> datetime | None:
    """The earliest PENDING target time (the scheduler sleeps until it)."""
    qs = Event.objects.filter(status=EventStatus.PENDING)
    if after is not None:
        qs = qs.filter(target_timestamp_utc__gt=after)
    first = qs.order_by("target_timestamp_utc").values_list("target_timestamp_utc", flat=True)[:1]
    return next(iter(first), None)


class MessageTemplates(Mapping[str, str]):
    """Every template in force, read at once: by event type its default (as a mapping), and `chosen`.

    `chosen` picks the text of one occurrence: in the recipient's language,
    else in each shorter form of it (pt-BR, then pt: scheduling.languages),
    else the type's default; within a language, the variant for the
    occurrence's milestone (its count of years) before the one for any year.
    A language's own text wins over a milestone in another: a Portuguese speaker's
    tenth anniversary in Portuguese, whatever the default says for tenths.
    """

    def __init__(
        self,
        *,
        defaults: dict[str, str],
        variants: dict[tuple[str, str, int | None], str],
        subjects: dict[tuple[str, str, int | None], str] | None = None,
    ) -> None:
        self._defaults = defaults
        self._variants = variants
        # An email's subjects, by (type, language, milestone) as the variants ("" language and None
        # milestone: the type's default row); only the rows that have one.
        self._subjects = subjects or {}
        # A batch asks again and again for a few (type, language, years, without): one answer each.
        self._chosen: dict[tuple[str, str, int | None, frozenset[str]], tuple[str, str]] = {}

    def __getitem__(self, event_type: str) -> str:
        return self._defaults[event_type]

    def __iter__(self) -> Iterator[str]:
        return iter(self._defaults)

    def __len__(self) -> int:
        return len(self._defaults)

    def chosen(
        self,
        *,
        event_type: str,
        language: str = "",
        years: int | None = None,
        without: frozenset[str] = frozenset(),
    ) -> tuple[str, str]:
        """The text of one occurrence and the language it is written in ("": the type's default, for every
        language); `without`: placeholders it must not use (an age not said).

        A text using one of `without` is passed over for the next in the order above, and
        past the type's default comes the handler's own text, which uses none
        (scheduling/tests/test_celebration.py holds each handler to that).
        """
        key = (event_type, language, years, without)
        chosen = self._chosen.get(key)
        if chosen is None:
            chosen = self._chosen[key] = self._lookup(
                event_type=event_type, language=language, years=years, without=without
            )
        return chosen

    def subject(self, *, event_type: str, language: str = "", years: int | None = None) -> str:
        """An email's subject template: the templates' own in the order `chosen` takes the texts (the
        recipient's language, its shorter forms, the default row; the milestone's first), else the
        type's default subject in that language (the handler's subject_templates, English last)."""
        fallbacks = language_fallbacks(language)
        for tag in fallbacks:
            for milestone in (years, None) if years is not None else (None,):
                subject = self._subjects.get((event_type, tag, milestone))
                if subject:
                    return subject
        defaults = get_handler(event_type).subject_templates
        return next((defaults[tag] for tag in fallbacks if tag in defaults), "")

    def _lookup(
        self, *, event_type: str, language: str, years: int | None, without: frozenset[str]
    ) -> tuple[str, str]:
        for tag in language_fallbacks(language):
            for milestone in (years, None) if years is not None else (None,):
                body = self._variants.get((event_type, tag, milestone))
                if body is not None and not (without and placeholders_used(body) & without):
                    return body, tag
        default = self._defaults[event_type]
        if without and placeholders_used(default) & without:
            return get_handler(event_type).message_template, ""
        return default, ""


class Occasion(Protocol):
    """What a message is rendered for, besides its recipient: an Event, or a row of one."""

    @property
    def event_type(self) -> str: ...
    @property
    def occurrence_date(self) -> date: ...


@dataclass(frozen=True)
class MessageChoice:
    """One occurrence's message as it would be rendered: its text, the template, and what chose it."""

    text: str
    template: str
    # The template's language ("": the type's default, which every language without its own gets).
    language: str
    # The years the occurrence counts (a birthday's age, an anniversary's years) if said; None otherwise.
    years: int | None
    # A destination's own text replaced the templates'.
    overridden: bool


def message_choice(
    *,
    templates: MessageTemplates,
    occasion: Occasion,
    user: Recipient,
    language: str = "",
    override: str | None = None,
) -> MessageChoice:
    """The message of one occurrence (the scheduler's, the console's), with the template it was rendered from and
    the language and milestone that chose it.

    `override`: a destination's own text, which replaces the templates'. A recipient whose
    age is not said (scheduling.celebration.age_said) gets no value for the type's
    age placeholders, and a text that uses one is passed over for one that does not.
    """
    event_type = occasion.event_type
    handler = get_handler(event_type)
    values = handler.message_values(user=user, occurrence_date=occasion.occurrence_date)
    unsaid = frozenset(name for name in handler.age_placeholders if name not in values)
    years = years_counted(values)
    if override is None or (unsaid and placeholders_used(override) & unsaid):
        template, tag = templates.chosen(
            event_type=event_type, language=language, years=years, without=unsaid
        )
        overridden = False
    else:
        template, tag, overridden = override, "", True
    return MessageChoice(
        text=template.format_map(values), template=template, language=tag, years=years, overridden=overridden
    )


def subject_for(
    *,
    templates: MessageTemplates,
    event_type: str,
    user: Recipient,
    occurrence_date: date,
    language: str = "",
) -> str:
    """An email's subject for one occurrence (MessageTemplates.subject), rendered from the recipient as they are."""
    handler = get_handler(event_type)
    values = handler.message_values(user=user, occurrence_date=occurrence_date)
    template = templates.subject(event_type=event_type, language=language, years=years_counted(values))
    return template.format_map(values)


def message_templates() -> MessageTemplates:
    """The templates every registered event type is rendered with now, in one query.

    The scheduler reads them once per claim batch, so every scheduler process
    renders with an operator's change from its next batch on, with no cache to
    invalidate. A type without its default row gets its handler's default, and so does a
    stored template that no longer fits its handler (a later release dropped a
    placeholder, or a write went around the model's validation): one bad row
    must not stop every message of its type; a bad variant is left out, its
    recipients getting the text it would have replaced.
    """
    defaults: dict[str, str] = {
        event_type: handler.message_template for event_type, handler in REGISTRY.items()
    }
    variants: dict[tuple[str, str, int | None], str] = {}
    subjects: dict[tuple[str, str, int | None], str] = {}
    for event_type, language, milestone, body, subject in MessageTemplate.objects.values_list(
        "event_type", "language", "milestone", "body", "subject"
    ):
        handler = REGISTRY.get(event_type)
        if handler is None:
            continue
        # A subject may not use an age placeholder: it shows in an inbox's list, to whoever looks.
        if subject and not template_errors(
            template=subject, placeholders=handler.placeholders - handler.age_placeholders
        ):
            subjects[(event_type, language, milestone)] = subject
        errors = template_errors(template=body, placeholders=handler.placeholders)
        if errors:
            logger.error(
                "Stored message template is not valid; sending the one it would have replaced",
                extra={
                    "event_type": event_type,
                    "language": language,
                    "milestone": milestone,
                    "errors": errors,
                },
            )
        elif not language and milestone is None:
            defaults[event_type] = body
        else:
            variants[(event_type, language, milestone)] = body
    return MessageTemplates(defaults=defaults, variants=variants, subjects=subjects)


@dataclass(frozen=True)
class MessagePreview:
    recipient: str
    occurrence_date: date
    text: str


def message_preview(*, event_type: str, body: str | None = None) -> MessagePreview | None:
    """The next message of this type as it would go out now: to the recipient whose PENDING
    event is due first, in the type's default template as the scheduler would use it, or in
    `body` (a variant's text, shown as it reads for that recipient). None if nobody has one.

    A real recipient rather than an invented one: it has whatever its event type
    reads, and the operator sees a case that is about to happen.
    """
    event = (
        Event.objects.filter(status=EventStatus.PENDING, event_type=event_type)
        .select_related("user")
        .order_by("target_timestamp_utc")
        .first()
    )
    if event is None:
        return None
    text = message_choice(templates=message_templates(), occasion=event, user=event.user, override=body).text
    return MessagePreview(recipient=str(event.user), occurrence_date=event.occurrence_date, text=text)


@dataclass(frozen=True)
class OverdueSummary:
    count: int
    oldest: datetime | None
    newest: datetime | None


def overdue_summary(*, now: datetime) -> OverdueSummary:
    """How many PENDING events are due and the range of their target times.

    COUNT(*), not of a column, so the range of event_pending_due_idx is read
    without visiting the rows (a backlog is when the metrics scrape this most).
    """
    row = Event.objects.filter(status=EventStatus.PENDING, target_timestamp_utc__lte=now).aggregate(
        count=Count("*"), oldest=Min("target_timestamp_utc"), newest=Max("target_timestamp_utc")
    )
    return OverdueSummary(count=row["count"], oldest=row["oldest"], newest=row["newest"])


def events_zone_data() -> EventZoneData:
    """Which time zone data the PENDING events follow, and the pass moving them to newer data, if one runs.

    An unsaved row when no scheduler has looked yet (version "": unknown).
    """
    return EventZoneData.objects.filter(pk=1).first() or EventZoneData()


# --- the operator console's dashboard and the metrics endpoint -------------------------
# Aggregates only: each function is one or two queries whose cost depends on the
# index ranges they read (the pending partial index within a time range,
# (status, updated_at), attempt finished_at), never on a Python loop over rows.


def event_processing_count() -> int:
    """Events claimed and not yet handled (PROCESSING), counted exactly: what is in flight.

    A range of the event_history_idx partial index, read without visiting the
    rows; the handled history beside it in that index is outside the range,
    so its size costs nothing here.
    """
    return Event.objects.filter(status=EventStatus.PROCESSING).count()


def event_status_estimates() -> dict[str, int]:
    """PostgreSQL's estimate of the events in each status, reading no row.

    Where an exact count would read an index entry per recipient (PENDING:
    one event per recipient and type) or all of the history (COMPLETED,
    FAILED), on every scrape and every dashboard view. The handled statuses
    come from the column's statistics (runtime.aggregates.estimated_counts_by).
    PENDING comes from its own partial index's entry count
    (estimated_index_entries), which the statistics could give too, but that
    count is exact as of every VACUUM, where theirs is always a sample's
    share; and, unlike the planner's row estimate of a WHERE status =
    'PENDING', it invents no rows for a table never analyzed. What is due
    is counted exactly (overdue_summary).
    """
    estimates = estimated_counts_by(Event, field="status", keys=EventStatus.values)
    estimates[EventStatus.PENDING] = estimated_index_entries(index=PENDING_DUE_INDEX)
    return estimates


def pending_per_hour(*, start: datetime, hours: int = 24) -> list[tuple[datetime, int]]:
    """PENDING events per UTC hour from `start` (an hour boundary), every hour listed.

    One GROUP BY over a range of the event_pending_due_idx partial index.
    """
    end = start + timedelta(hours=hours)
    counts = dict(
        Event.objects.filter(
            status=EventStatus.PENDING,
            target_timestamp_utc__gte=start,
            target_timestamp_utc__lt=end,
        )
        .annotate(hour=TruncHour("target_timestamp_utc", tzinfo=UTC))
        .values("hour")
        .annotate(count=Count("id"))
        .values_list("hour", "count")
    )
    return [(start + timedelta(hours=i), counts.get(start + timedelta(hours=i), 0)) for i in range(hours)]


def pending_per_type(*, start: datetime, hours: int = 24) -> dict[str, int]:
    """PENDING events per event type due from `start` for `hours`, every registered type listed.

    One GROUP BY over the same range of event_pending_due_idx as pending_per_hour.
    """
    due_in_range = Event.objects.filter(
        status=EventStatus.PENDING,
        target_timestamp_utc__gte=start,
        target_timestamp_utc__lt=start + timedelta(hours=hours),
    )
    return counts_by(due_in_range, field="event_type", keys=REGISTRY)


# Up to this many rows a status is counted exactly; beyond, its estimate stands, labelled.
EXACT_COUNT_UP_TO = 10_000


@dataclass(frozen=True)
class StatusCount:
    count: int
    exact: bool  # False: PostgreSQL's estimate (more than EXACT_COUNT_UP_TO rows)


def event_status_counts(*, exact_up_to: int = EXACT_COUNT_UP_TO) -> dict[str, StatusCount]:
    """The events in each status: counted exactly up to `exact_up_to`, estimated beyond.

    Each status's count reads at most `exact_up_to + 1` entries of its index
    (PENDING: event_pending_due_idx; the others: event_history_idx, led by
    status), so it costs the same at any size; past the bound the estimate
    (event_status_estimates) is used, never below the bound. A small or new
    installation gets exact figures, where estimates read "about 0" before
    the first ANALYZE.
    """
    estimates = event_status_estimates()
    table = Event._meta.db_table
    counts = {}
    with connection.cursor() as cursor:
        for status in EventStatus.values:
            cursor.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM {table} WHERE status = %s LIMIT %s) bounded",
                [status, exact_up_to + 1],
            )
            (found,) = cursor.fetchone()
            counts[status] = (
                StatusCount(found, True)
                if found <= exact_up_to
                else StatusCount(max(estimates.get(status, 0), exact_up_to + 1), False)
            )
    return counts
