from datetime import timedelta

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q

from delivery.credentials.receiver_urls import url_decrypt
from kinds import KINDS
from runtime.ids import uuid7
from scheduling.celebration import ChangedBy
from scheduling.event_types import EventType
from scheduling.labels import LABEL_MAX_LENGTH, labels_by_rule
from scheduling.pauses import ACTOR_MAX_LENGTH

# The kinds of destination (kinds/, one module each), as choices: a kind's name is the
# destination's `format` (STANDARD, SLACK, DISCORD, TEAMS, TEAMS_MESSAGECARD); its label names it.
# django-stubs types only the class form of TextChoices, not the functional one Django documents
# ("Enumeration types", the Enum functional API), hence the ignore.
DestinationFormat = models.TextChoices(  # type: ignore[call-overload]
    "DestinationFormat", [(name.upper(), (name, channel.label)) for name, channel in KINDS.items()]
)

# The formats whose kind can mention the person a message greets (kinds.base.Kind.mention_field).
MENTIONING_FORMATS = tuple(name for name, channel in KINDS.items() if channel.mention_field)


class Weekend(models.TextChoices):
    """Where a destination's greetings of a Saturday or a Sunday go (docs/design.md, "Digests and working days")."""

    # On the day itself, as every greeting always was.
    ON_THE_DAY = "ON_THE_DAY", "On the day"
    # A digest destination's Friday digest names Saturday's and Sunday's people too.
    FRIDAY_BEFORE = "FRIDAY_BEFORE", "The Friday before"
    # Monday's digest (or Monday's send time, for a destination taking one message per
    # occurrence) names Saturday's and Sunday's people.
    MONDAY_AFTER = "MONDAY_AFTER", "The Monday after"


class Weekday(models.TextChoices):
    """The day a weekly digest goes (Destination.digest_weekday), Monday first as date.weekday() counts."""

    MONDAY = "MONDAY", "Monday"
    TUESDAY = "TUESDAY", "Tuesday"
    WEDNESDAY = "WEDNESDAY", "Wednesday"
    THURSDAY = "THURSDAY", "Thursday"
    FRIDAY = "FRIDAY", "Friday"
    SATURDAY = "SATURDAY", "Saturday"
    SUNDAY = "SUNDAY", "Sunday"


# In date.weekday()'s order: WEEKDAYS.index(name) is the day's number.
WEEKDAYS: list[str] = list(Weekday.values)
# The furthest ahead a digest names (Destination.digest_days_ahead): a month's notice.
DIGEST_DAYS_AHEAD_MAX = 30


class DigestLanguage(models.TextChoices):
    """The language of a digest's words (its heading, each line): the channel's, whatever its people's."""

    EN = "en", "English"
    DE = "de", "Deutsch"


class Destination(models.Model):
    """A receiver of greetings: where, which event types, in which format, at what pace.

    Its URL's health, an operator's pause and the fleet's shared limits live in
    the Endpoint of the same URL (one source of truth for "paused"); the
    settings here are what an operator chose.
    """

    Format = DestinationFormat

    name = models.CharField(max_length=100, unique=True)
    # The receiver URL is a credential (delivery.credentials.receiver_urls): stored encrypted, told apart
    # by its keyed hash (one destination per receiver, whatever the spelling), shown redacted.
    url_ciphertext = models.TextField()
    url_key = models.CharField(max_length=32, unique=True)
    url_display = models.CharField(max_length=300)
    # The event types it receives; empty: every type, including types added later.
    event_types = ArrayField(
        models.CharField(max_length=32, choices=EventType.choices), default=list, blank=True
    )
    # Whom it greets (delivery.destinations.audience): recipients holding any of audience_labels (empty:
    # everyone), less those holding any of excluded_labels. Labels by the recipients'
    # grammar (scheduling.labels.clean_labels).
    audience_labels = ArrayField(
        models.CharField(max_length=LABEL_MAX_LENGTH), default=list, blank=True, db_default=[]
    )
    excluded_labels = ArrayField(
        models.CharField(max_length=LABEL_MAX_LENGTH), default=list, blank=True, db_default=[]
    )
    # Its own text per event type ({"BIRTHDAY": "🎂 Happy birthday, {first_name}!"}), instead of
    # the message templates' (any language, any milestone); a type it does not name keeps them.
    # Checked against the type's placeholders as a template is (delivery.destinations.fields).
    message_overrides = models.JSONField(default=dict, blank=True, db_default={})
    format = models.CharField(
        max_length=32, choices=DestinationFormat.choices, default=DestinationFormat.STANDARD
    )
    # Reaches the person it greets alone (their own inbox, a direct message): the only kind of
    # destination a person celebrated privately is greeted at (scheduling.celebration). Declared
    # by the operator; never a digest, which names many people.
    personal = models.BooleanField(default=False, db_default=False)
    # Disabled: occurrences claimed meanwhile get no delivery for it (what is queued still goes).
    enabled = models.BooleanField(default=True)
    # Set: a daily digest (delivery.dispatch.digests) at this wall time in digest_timezone, one
    # message naming the day's people, and no delivery per occurrence. Null: one message per
    # occurrence, at each recipient's own send time.
    digest_time = models.TimeField(null=True, blank=True)
    digest_timezone = models.CharField(max_length=64, blank=True, default="", db_default="")
    weekend = models.CharField(
        max_length=16, choices=Weekend.choices, default=Weekend.ON_THE_DAY, db_default=Weekend.ON_THE_DAY
    )
    # Ahead of the day: a digest names the dates this many days after the one it is sent on
    # (0: that date itself; 7: "In a week, Tuesday 8 December: …").
    digest_days_ahead = models.PositiveSmallIntegerField(default=0, db_default=0)
    # Set: a weekly digest, on this weekday only, naming the seven days from its date (plus
    # digest_days_ahead). Null: a daily one.
    # Null rather than "": "no weekday", as the API says it and the CHECK reads it.
    digest_weekday = models.CharField(  # noqa: DJ001
        max_length=9, choices=Weekday.choices, null=True, blank=True
    )
    digest_language = models.CharField(
        max_length=8, choices=DigestLanguage.choices, default=DigestLanguage.EN, db_default=DigestLanguage.EN
    )
    # The next digest: its local date and the instant it is due. Kept by the services (set with
    # the digest time, advanced by the scheduler as it builds one), so the scheduler's look for
    # due digests reads one partial index, and the console shows what is next.
    next_digest_date = models.DateField(null=True, blank=True)
    next_digest_at = models.DateTimeField(null=True, blank=True)
    # mentions: its messages mention the person they greet (their user id at its kind's service,
    # where they agreed: delivery.destinations.mentions); only a kind that mentions may.
    mention_recipient = models.BooleanField(default=False, db_default=False)
    # An email destination's (format "email": kinds.email, delivery.receivers.smtp): its URL is the
    # relay (smtps://, smtp:// with STARTTLS, smtp+plain:// in development); these say the rest.
    # From, with its display name; Reply-To ("": none).
    email_from = models.CharField(max_length=254, blank=True, default="", db_default="")
    email_from_name = models.CharField(max_length=100, blank=True, default="", db_default="")
    email_reply_to = models.CharField(max_length=254, blank=True, default="", db_default="")
    # Not personal: the fixed addresses every message goes to (an HR mailbox). Personal: none,
    # each message goes to the recipient's own address.
    email_to = ArrayField(models.CharField(max_length=254), default=list, blank=True, db_default=[])
    # The relay's login ("": none) and password, encrypted like the receiver URLs
    # (delivery.credentials.receiver_urls.url_encrypt); the password is never shown.
    smtp_username = models.CharField(max_length=200, blank=True, default="", db_default="")
    smtp_password_ciphertext = models.TextField(blank=True, default="", db_default="")
    # An attempt whose outcome is unknown (no reply after the final dot) is sent again under the
    # same Message-ID (true) or given up (false).
    email_resend_unknown = models.BooleanField(default=True, db_default=True)
    # Null: WEBHOOK_MAX_RATE / WEBHOOK_MAX_IN_FLIGHT / WEBHOOK_TIMEOUT.
    max_rate = models.FloatField(null=True, blank=True)
    max_in_flight = models.PositiveIntegerField(null=True, blank=True)
    # At most WEBHOOK_TIMEOUT (delivery.destinations.fields): leases are sized from that.
    timeout = models.DurationField(null=True, blank=True)
    created_by = models.CharField(max_length=150, blank=True, default="")
    updated_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Bumped by every change of its settings or secrets: the API's ETag, checked against If-Match.
    version = models.PositiveIntegerField(default=1)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(version__gte=1), name="destination_version_positive"),
            models.CheckConstraint(condition=~Q(name=""), name="destination_name_not_blank"),
            models.CheckConstraint(
                condition=Q(format__in=DestinationFormat.values), name="destination_format_valid"
            ),
            models.CheckConstraint(
                condition=Q(event_types__contained_by=EventType.values), name="destination_event_types_valid"
            ),
            models.CheckConstraint(
                condition=labels_by_rule("audience_labels"), name="destination_audience_labels_by_rule"
            ),
            models.CheckConstraint(
                condition=labels_by_rule("excluded_labels"), name="destination_excluded_labels_by_rule"
            ),
            models.CheckConstraint(
                condition=Q(max_rate__isnull=True) | Q(max_rate__gt=0), name="destination_max_rate_positive"
            ),
            models.CheckConstraint(
                condition=Q(max_in_flight__isnull=True) | Q(max_in_flight__gte=1),
                name="destination_max_in_flight_positive",
            ),
            # Its upper bound, WEBHOOK_TIMEOUT, is a setting: the service holds it to that.
            models.CheckConstraint(
                condition=Q(timeout__isnull=True) | Q(timeout__gt=timedelta(0)),
                name="destination_timeout_positive",
            ),
            models.CheckConstraint(condition=Q(weekend__in=Weekend.values), name="destination_weekend_valid"),
            # mentions: only a kind that mentions (Slack, Discord, Teams) mentions.
            models.CheckConstraint(
                condition=Q(mention_recipient=False) | Q(format__in=MENTIONING_FORMATS),
                name="destination_mention_recipient_by_kind",
            ),
            # A digest has a zone and a next one; a destination without one has neither.
            models.CheckConstraint(
                condition=Q(
                    digest_time__isnull=True, next_digest_at__isnull=True, next_digest_date__isnull=True
                )
                | (Q(digest_time__isnull=False) & ~Q(digest_timezone="") & Q(next_digest_at__isnull=False)),
                name="destination_digest_complete",
            ),
            models.CheckConstraint(
                condition=Q(personal=False) | Q(digest_time__isnull=True),
                name="destination_personal_not_digest",
            ),
            # An email destination sends from an address, and to the person (personal) or to its fixed
            # addresses, never both; no other kind holds email settings.
            models.CheckConstraint(
                condition=(
                    Q(format="email")
                    & ~Q(email_from="")
                    & (Q(personal=True, email_to=[]) | (Q(personal=False) & ~Q(email_to=[])))
                )
                | (~Q(format="email") & Q(email_from="", email_to=[], smtp_password_ciphertext="")),
                name="destination_email_settings_by_kind",
            ),
            models.CheckConstraint(
                condition=Q(digest_days_ahead__lte=DIGEST_DAYS_AHEAD_MAX),
                name="destination_digest_days_ahead_max",
            ),
            models.CheckConstraint(
                condition=Q(digest_weekday__isnull=True) | Q(digest_weekday__in=WEEKDAYS),
                name="destination_digest_weekday_valid",
            ),
            models.CheckConstraint(
                condition=Q(digest_language__in=DigestLanguage.values),
                name="destination_digest_language_valid",
            ),
        ]
        indexes = [
            # The scheduler's look for due digests, on every turn: only digest destinations are in it.
            models.Index(
                fields=["next_digest_at"],
                condition=Q(next_digest_at__isnull=False),
                name="destination_digest_due_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def receiver_url(self) -> str:
        """The full URL, token and all: to send, or for an operator who may change the destination."""
        return url_decrypt(self.url_ciphertext)

    def subscribes_to(self, event_type: str) -> bool:
        return not self.event_types or event_type in self.event_types

    @property
    def takes_digest(self) -> bool:
        return self.digest_time is not None

    @property
    def mails_the_person(self) -> bool:
        """Whether it mails each occurrence to its person's own address (and so needs a usable one)."""
        return self.personal and self.format == DestinationFormat.EMAIL


class Digest(models.Model):
    """One destination's message of one period, naming its dates' people (delivery.dispatch.digests).

    Unique per (destination, date) and per (destination, period): whatever the
    scheduler does twice (two schedulers, a retry after a lost commit), the
    second insert is refused and nothing more is queued. Its one Delivery sends
    it like any other.
    """

    id = models.BigAutoField(primary_key=True)
    # Null once its destination was deleted (refused while it has deliveries to send).
    destination = models.ForeignKey(
        Destination, on_delete=models.SET_NULL, null=True, blank=True, related_name="digests", db_index=False
    )
    # The date it is sent on, in the destination's zone; first/last: the occurrence dates it
    # names (Friday's digest of a "Friday before" destination names Friday to Sunday).
    local_date = models.DateField()
    first_date = models.DateField()
    last_date = models.DateField()
    # What it is once for (delivery.rules.digest_calendar.digest_period): its date for a daily
    # digest ("2026-12-01", "2026-12-01+7" a week ahead), its ISO week for a weekly one ("2026-W49").
    # Those built before periods were kept have their local_date (migration 0027).
    period = models.CharField(max_length=16)
    # "digest-" and a hash of (destination, period): the same on every attempt and resend.
    idempotency_key = models.CharField(max_length=32)
    # Its heading as built, in its destination's language then; "": built before headings were
    # kept (rendered from its dates, in English).
    heading = models.CharField(max_length=200, blank=True, default="", db_default="")
    # The language of its words (its destination's digest_language when built): its heading's and
    # lines', and the "… and N more" a chat service's limit adds.
    language = models.CharField(
        max_length=8, choices=DigestLanguage.choices, default=DigestLanguage.EN, db_default=DigestLanguage.EN
    )
    # What it names, one dict per occurrence (event_id, user_id, event_type, occurrence_date,
    # idempotency_key, line): the body is rendered from these, and an erasure takes a
    # recipient's out and renders it again (delivery.erasure).
    entries = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-local_date", "destination"]
        constraints = [
            # NULLs are distinct: the history of a deleted destination never collides.
            models.UniqueConstraint(
                fields=["destination", "local_date"], name="digest_one_per_destination_date"
            ),
            models.UniqueConstraint(
                fields=["destination", "period"], name="digest_one_per_destination_period"
            ),
            models.UniqueConstraint(fields=["idempotency_key"], name="digest_idempotency_key_unique"),
            models.CheckConstraint(condition=Q(first_date__lte=F("last_date")), name="digest_dates_ordered"),
        ]

    def __str__(self) -> str:
        return f"digest {self.local_date} of {self.destination_id}"


class DestinationOptOut(models.Model):
    """A person's "not here": no greeting of theirs goes to this destination, alone or in a digest.

    The person's say over one shared destination (their page, a one-click unsubscribe, an
    operator for them), beside their visibility (scheduling.celebration), which says the same
    for every destination at once. No row: the destination may greet them. The claim reads a
    person's rows with their occurrence (delivery.dispatch.claim), a digest leaves them out
    (delivery.dispatch.digests), and a new row withdraws what is queued and not yet sent
    (delivery.actions.optouts). Erased with the person or the destination (cascades).
    """

    user = models.ForeignKey("users.User", on_delete=models.CASCADE, related_name="destination_opt_outs")
    destination = models.ForeignKey(Destination, on_delete=models.CASCADE, related_name="opt_outs")
    created_at = models.DateTimeField()
    changed_by = models.CharField(max_length=16, choices=ChangedBy.choices)
    # The operator's or API account's username; "" for the person.
    actor = models.CharField(max_length=ACTOR_MAX_LENGTH, blank=True, default="")

    class Meta:
        constraints = [
            # Also the index the claim's read of a person's opt-outs probes, once per occurrence.
            models.UniqueConstraint(fields=["user", "destination"], name="destination_opt_out_once"),
            models.CheckConstraint(
                condition=Q(changed_by__in=ChangedBy.values), name="destination_opt_out_by_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_id} out of {self.destination_id}"


class CalendarFeed(models.Model):
    """A destination's calendar feed (delivery.upcoming.feeds): its URL's token, known only by its hash.

    The token is a credential, as a receiver URL is: whoever has the URL reads the feed. Only
    its SHA-256 is stored, so it is shown once, when issued; issuing again replaces it (the old
    URL stops working), deleting the row revokes it. One per destination.
    """

    destination = models.OneToOneField(Destination, on_delete=models.CASCADE, related_name="calendar_feed")
    token_sha256 = models.CharField(max_length=64, unique=True)
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(token_sha256__regex=r"^[0-9a-f]{64}$"), name="calendar_feed_token_is_a_sha256"
            ),
        ]

    def __str__(self) -> str:
        return f"Calendar feed of {self.destination}"


class DestinationSecret(models.Model):
    """One signing secret of a destination, encrypted (delivery.credentials.signing_secrets); several sign during a rotation."""

    destination = models.ForeignKey(Destination, on_delete=models.CASCADE, related_name="secrets")
    ciphertext = models.TextField()
    # The prefix and the key's first characters: what the console and the API show.
    hint = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)
    # Null: in force. Set when a newer secret replaces it; it signs until then, and is deleted after.
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["destination", "-created_at"]
        indexes = [
            # The periodic drop of expired secrets reads only the few rotated ones.
            models.Index(
                fields=["expires_at"],
                condition=Q(expires_at__isnull=False),
                name="destination_secret_expiry_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hint} of {self.destination_id}"


class DeliveryStatus(models.TextChoices):
    # Waiting for `next_attempt_at` (first try, or a retry after a transient failure).
    QUEUED = "QUEUED", "Queued"
    # Leased by a worker until `locked_until`; an expired lease is taken back.
    SENDING = "SENDING", "Sending"
    # The receiver answered 2xx.
    DELIVERED = "DELIVERED", "Delivered"
    # Given up: a permanent failure, or every attempt used.
    DEAD = "DEAD", "Dead"


class Delivery(models.Model):
    """The outbox row for one event occurrence, or for one digest: what to send, where, and how it went."""

    Status = DeliveryStatus

    # Time-ordered: rows written together stay together in the key's index (runtime.ids).
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # One delivery per occurrence and destination (delivery_one_per_destination),
    # whose index, led by event_id, also serves every lookup by event: a second
    # index of its own would only cost every insert one more write.
    # Null for a digest's delivery (`digest` set instead: delivery_event_or_digest).
    event = models.ForeignKey(
        "scheduling.Event",
        on_delete=models.CASCADE,
        related_name="deliveries",
        db_index=False,
        null=True,
        blank=True,
    )
    # The digest it sends (null for an occurrence's delivery): one delivery per digest, held by a
    # partial unique index (delivery_one_per_digest) that no occurrence's delivery is in. Every
    # move of a delivery writes a new entry in each index of its table that holds the row (a
    # status is in one, so no move is a HOT update), and a full index of this column would take
    # a NULL at every claim and every record.
    digest = models.ForeignKey(
        Digest, on_delete=models.CASCADE, related_name="deliveries", null=True, blank=True, db_index=False
    )
    # Null for history queued before destinations existed, and after its destination
    # was deleted (refused while it has deliveries to send: delivery.destinations.services).
    destination = models.ForeignKey(
        Destination,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="deliveries",
        db_index=False,
    )
    # Copied from the event so the worker's claim reads one table: the same key
    # at every destination (Standard Webhooks: one message, one id). Not indexed:
    # an index would cost every queued delivery one more random-page write.
    idempotency_key = models.CharField(max_length=32)
    # The endpoint it goes to, by the receiver's keyed hash (Endpoint.key), copied
    # from its destination when queued so the worker's claim reads one table and
    # no delivery holds the URL, a credential; an edit of the URL moves the
    # unsent deliveries with it.
    endpoint_key = models.CharField(max_length=32)
    # The JSON body, rendered when the event was claimed.
    payload = models.JSONField()
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    # Attempts allowed before DEAD: DELIVERY_MAX_ATTEMPTS when queued, raised by
    # that much again when an operator resends (attempt numbers keep counting).
    max_attempts = models.PositiveIntegerField()
    next_attempt_at = models.DateTimeField()
    locked_until = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=200, blank=True, default="")
    # When the attempt now under lease started (for the abandoned-attempt record).
    attempt_started_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)
    # A success writes no attempt row: its attempt is this row's (number `attempts`, started
    # `attempt_started_at`, answered `delivered_at` with `last_status_code`), and these three
    # hold the rest. Set (the duration not null) only on a DELIVERED row whose success is
    # recorded so; the attempt log's readers show it as the attempt it is
    # (delivery.selectors.delivery_attempts), and a move out of DELIVERED or an erasure writes
    # it down as a row first (delivery.states.successes). Null or a constant default, so
    # that adding them rewrote no row.
    delivered_by = models.CharField(max_length=200, blank=True, default="", db_default="")
    delivered_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # The receiver's answer, as an attempt row keeps it (DeliveryAttempt.response_excerpt).
    delivered_response = models.TextField(blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)
    # When an operator last queued it again (null: never; it was queued when
    # created). EVENT_MAX_LATENESS counts from the later of the two. Nullable so
    # that adding it rewrote no row of history.
    requeued_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "deliveries"
        ordering = ["-created_at"]
        constraints = [
            # NULLs are distinct: history rows without a destination never collide.
            models.UniqueConstraint(fields=["event", "destination"], name="delivery_one_per_destination"),
            models.UniqueConstraint(
                fields=["digest"], condition=Q(digest__isnull=False), name="delivery_one_per_digest"
            ),
            # An occurrence's delivery or a digest's, never both nor neither.
            models.CheckConstraint(
                condition=Q(event__isnull=False, digest__isnull=True)
                | Q(event__isnull=True, digest__isnull=False),
                name="delivery_event_or_digest",
            ),
            models.CheckConstraint(
                condition=Q(status__in=DeliveryStatus.values), name="delivery_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status=DeliveryStatus.SENDING)
                | (Q(locked_until__isnull=False) & ~Q(locked_by="")),
                name="delivery_sending_has_lease",
            ),
        ]
        indexes = [
            # The worker's claim of due work: only QUEUED rows are in it.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status=DeliveryStatus.QUEUED),
                name="delivery_queued_due_idx",
            ),
            # Taking back expired leases: only SENDING rows are in it.
            models.Index(
                fields=["locked_until"],
                condition=Q(status=DeliveryStatus.SENDING),
                name="delivery_lease_idx",
            ),
            models.Index(fields=["status", "updated_at"], name="delivery_status_updated_idx"),
            # A destination's dead deliveries by when they died: its health (dead in the last hour
            # and day, its latest failure) and its failures by cause read a range of it, whatever
            # the other destinations' failures and the history. Partial: only DEAD rows are in it,
            # so delivering writes nothing to it.
            models.Index(
                fields=["destination", "updated_at"],
                condition=Q(status=DeliveryStatus.DEAD),
                name="delivery_dead_destination_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} ({self.status})"


class AttemptOutcome(models.TextChoices):
    DELIVERED = "DELIVERED", "Delivered"
    TRANSIENT_FAILURE = "TRANSIENT_FAILURE", "Transient failure"
    PERMANENT_FAILURE = "PERMANENT_FAILURE", "Permanent failure"
    # The worker holding the lease vanished (killed, lost its host) mid-attempt.
    ABANDONED = "ABANDONED", "Abandoned by a lost worker"


class DeliveryAttempt(models.Model):
    """One try at sending a delivery. Append-only: never updated, never deleted alone."""

    Outcome = AttemptOutcome
    RESPONSE_EXCERPT_BYTES = 2048

    id = models.BigAutoField(primary_key=True)
    # No index of its own: attempt_unique_number (delivery, number) starts with it
    # and serves every lookup by delivery, so a second index would only cost
    # space and writes on every attempt. NULL once the delivery's recipient was
    # erased: the attempt stays, naming no one (delivery.erasure), until
    # the history prune.
    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="attempt_log", db_index=False, null=True
    )
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    outcome = models.CharField(max_length=24, choices=AttemptOutcome.choices)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    response_excerpt = models.TextField(blank=True, default="")
    # What the attempt led to, as the retry decision said (delivery.rules.retry.Decision): whether it
    # was counted against max_attempts (a 429, a gone webhook or a receiver that is down cost
    # none), and the delivery's status after it (QUEUED: tried again or held; DEAD; DELIVERED).
    # NULL and "" for attempts recorded before these were kept (a database default: rows written
    # without them, as a restore or a bench's COPY may, are taken). An attempt is labelled by them,
    # not by its delivery's final state (delivery.rules.attempt_words).
    counted = models.BooleanField(null=True, blank=True)
    delivery_status_after = models.CharField(max_length=16, blank=True, db_default="")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="attempt_unique_number"),
            models.CheckConstraint(
                condition=Q(outcome__in=AttemptOutcome.values), name="attempt_outcome_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["finished_at"], name="attempt_finished_idx"),
            # The console's "had an attempt that was ..." filter: the deliveries
            # with a failed attempt, newest first, without reading every
            # delivery to find the few. Partial: a successful attempt, what
            # almost every send writes, adds nothing to it.
            models.Index(
                fields=["outcome", "delivery"],
                condition=~Q(outcome=AttemptOutcome.DELIVERED),
                name="attempt_failed_idx",
            ),
            # The erased recipients' attempts (no delivery), for the history prune:
            # only those are in it, not the old range of attempt_finished_idx,
            # which also holds the attempts of every occurrence kept as the latest.
            models.Index(
                fields=["finished_at"],
                condition=Q(delivery__isnull=True),
                name="attempt_erased_finished_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}: {self.outcome}"


class EndpointState(models.TextChoices):
    # Deliveries flow at the receiver's pace.
    HEALTHY = "HEALTHY", "Healthy"
    # The receiver kept failing: deliveries wait without spending attempts while
    # one probe at a time tries it; the first success makes it HEALTHY again.
    FAILING = "FAILING", "Failing"
    # An operator paused it: deliveries stay QUEUED until resumed.
    PAUSED = "PAUSED", "Paused"
    # Its service answered that the destination no longer exists (a deleted webhook, an
    # archived channel: kinds.base.Verdict.GONE): deliveries stay QUEUED, without
    # spending attempts and without probes, until an operator resumes it or changes the URL.
    GONE = "GONE", "Gone"


class Endpoint(models.Model):
    """A receiver (one webhook URL): its health, an operator's pause, and the fleet's shared limits.

    Known by the URL's keyed hash (delivery.credentials.receiver_urls), the URL kept
    encrypted beside it for the workers; made and removed with the destination
    of that URL (delivery.destinations.services).

    One small row per URL that every worker reads before claiming and writes
    when the receiver's answers change what the fleet should do, so a failing
    or paused receiver holds back every worker, not just the one that noticed.
    """

    State = EndpointState

    key = models.CharField(max_length=32, unique=True)
    url_ciphertext = models.TextField()
    url_display = models.CharField(max_length=300)
    state = models.CharField(max_length=16, choices=EndpointState.choices, default=EndpointState.HEALTHY)
    # Endpoint-level failures since the last success (timeouts, connection errors,
    # 5xx, 429, and 401/403/404/410 that nothing contradicts), over all workers.
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_success_at = models.DateTimeField(null=True, blank=True)
    last_failure_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    failing_since = models.DateTimeField(null=True, blank=True)
    # FAILING: when the next probe may start (a probe in flight pushes it past its lease).
    next_probe_at = models.DateTimeField(null=True, blank=True)
    # FAILING: the wait after the next failed probe; doubles up to ENDPOINT_PROBE_MAX_INTERVAL.
    probe_interval = models.DurationField(null=True, blank=True)
    # A Retry-After (429, or 503 with the header): no worker starts a request before then.
    blocked_until = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True, default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    # The max rate's schedule in calendar seconds (delivery.rules.pace): the second (of the
    # epoch) whose request slots the workers are taking, and how many of them are gone.
    rate_second = models.BigIntegerField(null=True, blank=True)
    # A default in the database too: the previous release inserts rows without the column.
    rate_taken = models.PositiveIntegerField(default=0, db_default=0)
    # The schedule before it (one instant, 1/rate apart), no longer read or written here: kept
    # while workers of the release before delivery.rules.pace may still run beside these (a rolling
    # deploy), which read it on every endpoint row; a later release's migration drops it.
    next_send_slot = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["url_display", "key"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=EndpointState.values), name="endpoint_state_valid"),
            models.CheckConstraint(
                condition=~Q(state=EndpointState.FAILING)
                | (
                    Q(failing_since__isnull=False)
                    & Q(next_probe_at__isnull=False)
                    & Q(probe_interval__isnull=False)
                ),
                name="endpoint_failing_has_probe",
            ),
            models.CheckConstraint(
                condition=~Q(state=EndpointState.PAUSED) | Q(paused_at__isnull=False),
                name="endpoint_paused_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.url_display} ({self.state})"


class EndpointPermit(models.Model):
    """The share of WEBHOOK_MAX_IN_FLIGHT one worker holds for one endpoint, under a lease.

    A worker raises or lowers its own row while holding the endpoint's row lock,
    so the shares never add up to more than the cap; a worker that dies stops
    renewing, and its share returns to the others when the lease runs out.
    """

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="permits", db_index=False)
    worker = models.CharField(max_length=200)
    permits = models.PositiveIntegerField()
    expires_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["endpoint", "worker"], name="endpoint_permit_one_per_worker"),
        ]

    def __str__(self) -> str:
        return f"{self.worker}: {self.permits} of {self.endpoint_id}"


class RecoveryStatus(models.TextChoices):
    # Counted and recorded; no worker has taken a batch yet.
    PENDING = "PENDING", "Pending"
    # Workers are queuing its deliveries again, a batch at a time.
    RUNNING = "RUNNING", "Running"
    # Nothing left in its window: every delivery counted was queued again or skipped.
    FINISHED = "FINISHED", "Finished"
    # Stopped by an operator; what was queued again by then still goes.
    CANCELLED = "CANCELLED", "Cancelled"


# The states a recovery may take deliveries from: the ended ones.
RECOVERABLE_STATUSES = (DeliveryStatus.DEAD, DeliveryStatus.DELIVERED)


class Recovery(models.Model):
    """An operator's "send again everything this destination got between two instants".

    Its deliveries in `states` whose time (updated_at: when each reached that
    state, so for DELIVERED when the receiver's answer was recorded, for DEAD
    when it was given up) lies in [since, until) and before the request are
    queued again under their own idempotency keys, by the workers, a batch at a
    time (delivery.actions.recovery). `total` is what the operator was shown
    and confirmed; `done` and `skipped` add up to it when it is FINISHED.
    """

    Status = RecoveryStatus

    destination = models.ForeignKey(Destination, on_delete=models.CASCADE, related_name="recoveries")
    states = ArrayField(models.CharField(max_length=16, choices=DeliveryStatus.choices))
    since = models.DateTimeField()
    until = models.DateTimeField()
    requested_by = models.CharField(max_length=150)
    # Also the window's hard end: what ended after the request (its own resends among
    # them) is never taken, so a recovery always comes to an end.
    requested_at = models.DateTimeField()
    status = models.CharField(max_length=16, choices=RecoveryStatus.choices, default=RecoveryStatus.PENDING)
    # The deliveries counted when it was asked for: what the operator confirmed.
    total = models.PositiveIntegerField()
    # Queued again so far.
    done = models.PositiveIntegerField(default=0)
    # Counted but not queued again: gone since (recipient erased, event pruned), sent
    # again meanwhile by other means, or whose recipient no longer has that date.
    skipped = models.PositiveIntegerField(default=0)
    # The last delivery looked at, (status, updated_at, id): the next batch starts after it.
    cursor_status = models.CharField(max_length=16, blank=True, default="")
    cursor_at = models.DateTimeField(null=True, blank=True)
    cursor_id = models.UUIDField(null=True, blank=True)
    batches = models.PositiveIntegerField(default=0)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "recoveries"
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RecoveryStatus.values), name="recovery_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(since__lt=models.F("until")), name="recovery_since_before_until"
            ),
            models.CheckConstraint(
                condition=Q(states__contained_by=list(RECOVERABLE_STATUSES)) & Q(states__len__gte=1),
                name="recovery_states_valid",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[RecoveryStatus.PENDING, RecoveryStatus.RUNNING])
                | Q(finished_at__isnull=False),
                name="recovery_ended_has_time",
            ),
            # Two at once could send a delivery twice (the second counting what the
            # first has not reached yet): one running recovery per destination.
            models.UniqueConstraint(
                fields=["destination"],
                condition=Q(status__in=[RecoveryStatus.PENDING, RecoveryStatus.RUNNING]),
                name="recovery_one_active_per_destination",
            ),
        ]
        indexes = [
            # The workers' look for work: only the unfinished ones are in it.
            models.Index(
                fields=["requested_at"],
                condition=Q(status__in=[RecoveryStatus.PENDING, RecoveryStatus.RUNNING]),
                name="recovery_active_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"recovery {self.pk} of {self.destination_id} ({self.status})"


class FailureAcknowledgement(models.Model):
    """An operator's "seen it": a destination's dead deliveries of one cause, up to `through`, leave the failures list.

    One row per (destination, cause), moved forward by each acknowledgement
    (delivery.actions.failures). A delivery of that cause given up after
    `through` brings the group back: an acknowledgement is of what was seen,
    never of what comes next. The deliveries themselves are not touched.
    """

    destination = models.ForeignKey(
        Destination, on_delete=models.CASCADE, related_name="failure_acknowledgements"
    )
    # delivery.rules.failure_causes: "http_400", "timeout", "connection", ...
    cause = models.CharField(max_length=32)
    # Dead deliveries given up (updated_at) at or before this are acknowledged.
    through = models.DateTimeField()
    acknowledged_by = models.CharField(max_length=150)
    acknowledged_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["destination", "cause"], name="failure_ack_one_per_group"),
            models.CheckConstraint(condition=~Q(cause=""), name="failure_ack_cause_not_blank"),
            models.CheckConstraint(condition=~Q(acknowledged_by=""), name="failure_ack_by_whom"),
        ]

    def __str__(self) -> str:
        return f"{self.cause} at {self.destination_id} through {self.through:%Y-%m-%d %H:%M}"
