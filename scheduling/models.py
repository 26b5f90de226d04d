from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils.crypto import salted_hmac

from runtime.ids import uuid7
from scheduling.celebration import Visibility
from scheduling.event_types import EventType
from scheduling.handlers import REGISTRY
from scheduling.languages import LANGUAGE_MAX_LENGTH, clean_language
from scheduling.messages import MESSAGE_TEMPLATE_MAX_LENGTH, YEAR_PLACEHOLDERS, template_errors
from scheduling.pauses import ACTOR_MAX_LENGTH, Pausable, pause_constraints


class EventStatus(models.TextChoices):
    # Waiting for its target time; exactly one per user and event type.
    PENDING = "PENDING", "Pending"
    # Claimed by the scheduler; its delivery is queued or being sent.
    PROCESSING = "PROCESSING", "Processing"
    # The receiver accepted the message.
    COMPLETED = "COMPLETED", "Completed"
    # Given up: too late to send, or the delivery died. Operators may resend.
    FAILED = "FAILED", "Failed"


# Separates DeletedRecipientOccurrence's digests from every other HMAC made with the SECRET_KEY.
_DELETED_RECIPIENT_SALT = "scheduling.DeletedRecipientOccurrence"

# The partial index of the PENDING events (one per recipient and event type),
# named where its size stands for their number (scheduling.selectors).
PENDING_DUE_INDEX = "event_pending_due_idx"


class Event(models.Model):
    """One occurrence of a time-based event (a birthday in a given year) for one user."""

    Status = EventStatus
    Type = EventType

    # Time-ordered: rows written together stay together in the key's index (runtime.ids).
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # No index of its own: the unique (user, event_type, occurrence_date) index
    # starts with user and serves every lookup by user.
    user = models.ForeignKey("users.User", on_delete=models.CASCADE, related_name="events", db_index=False)
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    status = models.CharField(max_length=16, choices=EventStatus.choices, default=EventStatus.PENDING)
    # The date in the user's own calendar being celebrated (Feb 28 for a Feb 29
    # birthday in a non-leap year).
    occurrence_date = models.DateField()
    target_timestamp_utc = models.DateTimeField()
    # The local wall time with its UTC offset, as ISO 8601 text
    # ("2027-03-14T09:00:00-04:00"). A DateTimeField would be normalised to UTC
    # under USE_TZ and lose exactly the information this column exists to keep.
    target_timestamp_local = models.CharField(max_length=40)
    target_timezone = models.CharField(max_length=64)
    executed_at = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True, default="")
    # Bumped by every conditional UPDATE (scheduling.services.transitions).
    version = models.PositiveIntegerField(default=1)
    # Unique through a constraint in Meta, not unique=True: that would also make
    # Django add a varchar_pattern_ops (LIKE) index nobody uses (the key is only
    # ever matched exactly), a sizeable share of the table's bytes and one more
    # page written at a random place per event (after a checkpoint, a full page
    # image in the WAL).
    idempotency_key = models.CharField(max_length=32)
    # What was sent and how many attempts it took live on the event's delivery
    # (delivery.Delivery.payload and .attempts), the one record of both.
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-occurrence_date", "-created_at"]
        constraints = [
            models.CheckConstraint(condition=Q(status__in=EventStatus.values), name="event_status_valid"),
            models.CheckConstraint(condition=Q(event_type__in=EventType.values), name="event_type_valid"),
            models.CheckConstraint(condition=Q(version__gte=1), name="event_version_positive"),
            models.UniqueConstraint(fields=["idempotency_key"], name="event_idempotency_key_unique"),
            models.UniqueConstraint(
                fields=["user", "event_type", "occurrence_date"],
                name="event_one_per_user_type_occurrence",
            ),
            models.UniqueConstraint(
                fields=["user", "event_type"],
                condition=Q(status=EventStatus.PENDING),
                name="event_one_pending_per_user_type",
            ),
        ]
        indexes = [
            # The scheduler's claim: PENDING rows in target order. Partial, so it
            # holds only the pending rows (one per user), not years of history.
            models.Index(
                fields=["target_timestamp_utc"],
                condition=Q(status=EventStatus.PENDING),
                name=PENDING_DUE_INDEX,
            ),
            # History (everything not PENDING) by status and time, for the console's
            # filters and counts. Partial, so the planner can never pick it over
            # event_pending_due_idx for the claim.
            models.Index(
                fields=["status", "target_timestamp_utc"],
                condition=~Q(status=EventStatus.PENDING),
                name="event_history_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_event_type_display()} {self.occurrence_date} ({self.status})"


class DeletedRecipientOccurrence(models.Model):
    """An occurrence handled for a recipient since deleted, known only by a keyed digest of their external id.

    A recipient deleted and created again with the same external id (a client's
    sync, an import run again) is a new row with a new id, and so new
    idempotency keys: nothing of theirs says that today's greeting already went
    out. This does, for as long as the occurrence could be caught up again
    (`expires_at`, scheduling.services.deleted_recipients), and no longer: the
    history prune deletes the expired rows. The digest is an HMAC under the
    SECRET_KEY, so the row holds neither the id nor anything it could be
    reversed to without the key.
    """

    recipient_digest = models.CharField(max_length=64)
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    occurrence_date = models.DateField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["recipient_digest", "event_type", "occurrence_date"], name="deleted_occurrence_unique"
            ),
            models.CheckConstraint(
                condition=Q(event_type__in=EventType.values), name="deleted_occurrence_event_type_valid"
            ),
        ]
        indexes = [models.Index(fields=["expires_at"], name="deleted_occurrence_expiry_idx")]

    def __str__(self) -> str:
        return f"{self.get_event_type_display()} {self.occurrence_date} of a deleted recipient"

    @staticmethod
    def digest_of(external_id: str) -> str:
        """The keyed digest a deleted recipient's occurrences are remembered by (HMAC-SHA256, hex)."""
        return salted_hmac(_DELETED_RECIPIENT_SALT, external_id, algorithm="sha256").hexdigest()


class EventTypePause(Pausable, models.Model):
    """Whether one event type's messages are held back for every recipient (scheduling.pauses).

    One row per registered type, created by migrate; who paused it and when,
    and who resumed it and when.
    """

    event_type = models.CharField(max_length=32, choices=EventType.choices, unique=True)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="")
    resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_by = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="")

    class Meta:
        verbose_name = "event type pause"
        ordering = ["event_type"]
        constraints = [
            models.CheckConstraint(
                condition=Q(event_type__in=EventType.values), name="event_type_pause_event_type_valid"
            ),
            *pause_constraints(prefix="event_type_pause"),
        ]

    def __str__(self) -> str:
        return f"{self.get_event_type_display()} messages ({'paused' if self.paused else 'going out'})"


class CelebrationDefault(models.Model):
    """The company's visibility of one event type for every person who has not chosen their own
    (scheduling.celebration). A type without a row is public, as every type was before there was a choice."""

    event_type = models.CharField(max_length=32, choices=EventType.choices, unique=True)
    visibility = models.CharField(max_length=8, choices=Visibility.choices)
    updated_by = models.CharField(max_length=ACTOR_MAX_LENGTH)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["event_type"]
        constraints = [
            models.CheckConstraint(
                condition=Q(event_type__in=EventType.values), name="celebration_default_event_type_valid"
            ),
            models.CheckConstraint(
                condition=Q(visibility__in=Visibility.values), name="celebration_default_visibility_valid"
            ),
            models.CheckConstraint(condition=~Q(updated_by=""), name="celebration_default_by_whom"),
        ]

    def __str__(self) -> str:
        return f"{self.get_event_type_display()}: {self.get_visibility_display()} unless a person chose"


class MessageTemplate(models.Model):
    """The text operators chose for one event type's messages, rendered when each event is claimed.

    One row per registered type with no language and no milestone, the type's
    default (created by migrate, holding the handler's default:
    scheduling.services.messages; a type without it gets the handler's).
    Operators add variants: in a language (a recipient's language, else its
    base language, chooses it: scheduling.selectors.MessageTemplates), and for
    a milestone (the occurrence's count of years, 1, 5, 10 ..., of a type whose
    messages count them: a birthday's age, an anniversary's years).
    """

    event_type = models.CharField(max_length=32, choices=EventType.choices)
    # A BCP 47 tag (scheduling.languages); "": the type's default, for every language without its own.
    language = models.CharField(
        max_length=LANGUAGE_MAX_LENGTH,
        blank=True,
        default="",
        db_default="",
        help_text="A language tag such as de or pt-BR; empty: for every recipient without a template in "
        "their language.",
    )
    # The years counted on the occurrence this text is for; null: any.
    milestone = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Only for the occurrence counting this many years (a 10th anniversary, a 30th birthday); "
        "empty: any.",
    )
    # Placeholders as in str.format ({first_name}), checked against the type's
    # handler by clean(); varchar, so PostgreSQL also enforces the length.
    body = models.CharField(
        max_length=MESSAGE_TEMPLATE_MAX_LENGTH,
        help_text="Placeholders in braces, e.g. {first_name}; write {{ or }} for a literal brace. "
        "Applies to the events claimed after it is saved, not to messages already queued.",
    )
    # An email's subject (kinds.email), placeholders as in the body; "": the type's default subject in
    # the recipient's language (the handler's subject_templates). Checked as the body is.
    subject = models.CharField(
        max_length=200,
        blank=True,
        default="",
        db_default="",
        help_text="The subject of an email greeting, placeholders as in the text; empty: the event type's "
        "default subject in the recipient's language.",
    )
    updated_at = models.DateTimeField(auto_now=True)
    # The operator's username, kept as text so the record outlives the account;
    # blank while the row still holds the default migrate wrote.
    updated_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        ordering = ["event_type", "language", "milestone"]
        constraints = [
            # One text per type, language and milestone, the default row (no language, no
            # milestone) included: NULLs not distinct, so a second "any year" row is refused.
            models.UniqueConstraint(
                fields=["event_type", "language", "milestone"],
                name="message_template_one_per_variant",
                nulls_distinct=False,
            ),
            models.CheckConstraint(
                condition=Q(event_type__in=EventType.values), name="message_template_event_type_valid"
            ),
            # At least one non-whitespace character (TRIM() strips only spaces).
            models.CheckConstraint(condition=Q(body__regex=r"\S"), name="message_template_body_not_blank"),
            models.CheckConstraint(
                condition=Q(milestone__isnull=True) | Q(milestone__gte=1),
                name="message_template_milestone_positive",
            ),
        ]

    def __str__(self) -> str:
        variant = " ".join(
            part for part in (self.language, f"year {self.milestone}" if self.milestone else "") if part
        )
        return f"{self.get_event_type_display()} message" + (f" ({variant})" if variant else "")

    @property
    def is_default(self) -> bool:
        """The type's own row, which migrate creates and nothing deletes."""
        return not self.language and self.milestone is None

    def clean(self) -> None:
        errors = {}
        try:
            self.language = clean_language(self.language)
        except ValidationError as exc:
            errors["language"] = exc.messages
        if self.milestone is not None and self.milestone < 1:
            errors["milestone"] = ["A number of years from 1, or empty for any year."]
        handler = REGISTRY.get(self.event_type)
        if (
            handler is not None
            and self.milestone is not None
            and not (handler.placeholders & YEAR_PLACEHOLDERS)
        ):
            errors["milestone"] = [
                f"{self.event_type} messages count no years: a milestone cannot be chosen."
            ]
        # An unknown type or an empty body is already the field's own error.
        if handler is not None and self.body:
            body_errors = template_errors(template=self.body, placeholders=handler.placeholders)
            if body_errors:
                errors["body"] = body_errors
        if handler is not None and self.subject:
            # No age in a subject: it shows in an inbox's list, to whoever looks at the screen.
            subject_errors = template_errors(
                template=self.subject, placeholders=handler.placeholders - handler.age_placeholders
            )
            if subject_errors:
                errors["subject"] = subject_errors
        if errors:
            raise ValidationError(errors)


class EventZoneData(models.Model):
    """Which time zone database the PENDING events' instants follow: one row.

    An event's instant is computed once, from its local wall time, by the
    rules of the time zone database the computing process had loaded. When a
    scheduler runs with a newer database than this row names, it recomputes
    every PENDING event (scheduling.services.zone_rules) and records the new
    version here once the pass is complete. One row, not a column per event:
    a version on every event would cost a write to every pending row whenever
    the rules change, where only the rows of the zones that changed move. A
    pass records where it stands after each batch, so one cut short (a crash,
    a stop) resumes there, and a batch done twice moves nothing.
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1, editable=False)
    # Every PENDING event's instant follows this version's rules ("" before the first complete pass).
    version = models.CharField(max_length=32, blank=True, default="")
    # The pass in progress ("" when none): the version it moves the events to,
    # and the last event it looked at, in the order of the claim's index (target, id).
    pass_version = models.CharField(max_length=32, blank=True, default="")
    pass_after_target = models.DateTimeField(null=True, blank=True)
    pass_after_id = models.UUIDField(null=True, blank=True)
    # Events the last pass (or the one in progress) moved, per zone: {"Asia/Almaty": 1200}.
    moved = models.JSONField(default=dict, blank=True)
    pass_started_at = models.DateTimeField(null=True, blank=True)
    pass_completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "time zone data of the pending events"
        verbose_name_plural = verbose_name
        constraints = [models.CheckConstraint(condition=Q(id=1), name="event_zone_data_one_row")]

    def __str__(self) -> str:
        return f"Pending events follow time zone data {self.version or 'unknown'}"
