"""Writes to recipients. Scheduling follows through the post_save receiver, or, for the
bulk import (which skips signals), through the same scheduling services called here."""

from __future__ import annotations

import logging
import secrets
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, NamedTuple, Unpack

from django.conf import settings
from django.core import signing
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.urls import reverse
from django.utils import timezone

from runtime.copy import copy_rows
from scheduling.admin_log import admin_log_forget
from scheduling.celebration import ChangedBy, age_said, age_unsaid, celebration_narrowed
from scheduling.models import Event
from scheduling.selectors import deleted_occurrences_latest
from scheduling.services.deleted_recipients import deleted_occurrences_record
from scheduling.services.occurrences import (
    PendingEventRow,
    first_pending_event_rows,
    pending_event_defaults,
)
from users.fields import (
    MENTION_FIELDS,
    RECIPIENT_FIELDS,
    USER_FIELDS,
    NewRecipient,
    clean_paused,
    clean_user_fields,
    clean_visibility,
)
from users.models import EXTERNAL_ID_UNIQUE, CelebrationChange, CelebrationChoice, PersonalLink, User
from users.selectors import PERSONAL_LINK_SALT, users_by_external_id
from users.signals import recipient_erasing
from users.validators import clean_email

logger = logging.getLogger(__name__)


class ExternalIdTaken(ValidationError):
    """Another recipient holds the external id: the database's unique constraint refused a second.

    A ValidationError of the field, so the API answers 400 naming it. The
    constraint decides, not a read before the write: two clients writing the
    same id at once would both pass a read.
    """

    def __init__(self, message: str):
        super().__init__({"external_id": [message]})


def _is_external_id_conflict(exc: IntegrityError) -> bool:
    # PostgreSQL names the constraint the row broke (psycopg's diagnostics).
    diag = getattr(exc.__cause__, "diag", None)
    return diag is not None and diag.constraint_name == EXTERNAL_ID_UNIQUE


@contextmanager
def _external_id_taken_as(message: str) -> Iterator[None]:
    """The external_id constraint refusing a write inside becomes ExternalIdTaken(message); other errors pass."""
    try:
        yield
    except IntegrityError as exc:
        if not _is_external_id_conflict(exc):
            raise
        raise ExternalIdTaken(message) from exc


def _taken_message(external_id: str) -> str:
    return f"External id {external_id!r} is already used by another recipient."


def user_create(
    *,
    paused: bool = False,
    by: str = "",
    visibility: dict[str, str | None] | None = None,
    changed_by: str = "",
    **fields: Unpack[NewRecipient],
) -> User:
    """Validate and create a user; its first event is created in the same transaction.

    `fields`: the recipient's (users.fields.USER_FIELDS). `paused`: created with
    their greetings held back, paused by `by` (the operator or API account).
    `visibility`: their own choices per event type (users.fields.clean_visibility);
    with hide_age, recorded as made by `changed_by` (scheduling.celebration.ChangedBy) and `by`.
    """
    unknown = set(fields) - set(USER_FIELDS)
    if unknown:
        raise TypeError(f"user_create() got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    paused = _clean_paused(paused)
    choices = _clean_visibility(visibility or {})
    cleaned = clean_user_fields(fields)
    user = User(**cleaned)
    now = timezone.now()
    if paused:
        _pause_columns(user=user, paused=True, by=by, now=now)
    with transaction.atomic():
        with _external_id_taken_as(_taken_message(cleaned["external_id"])):
            user.save(force_insert=True)
        changes = _say_changes(
            old_choices={}, new_choices=choices, old_hide_age=False, new_hide_age=user.hide_age
        )
        _say_write(user_id=user.id, choices=choices, changes=changes, changed_by=changed_by, by=by, now=now)
    logger.info("Created user", extra={"user_id": str(user.id)})
    return user


# --- the person's say (scheduling.celebration) ---------------------------------


def _clean_visibility(value: object) -> dict[str, str | None]:
    try:
        return clean_visibility(value)
    except ValidationError as exc:
        raise ValidationError({"visibility": exc.messages}) from None


def celebration_choices_of(*, user_id: uuid.UUID) -> dict[str, str]:
    """The person's own visibility per event type (a type absent: the company default)."""
    return dict(CelebrationChoice.objects.filter(user_id=user_id).values_list("event_type", "visibility"))


class _SayChange(NamedTuple):
    field: str
    event_type: str
    old_value: str
    new_value: str


def _say_changes(
    *,
    old_choices: dict[str, str],
    new_choices: dict[str, str | None],
    old_hide_age: bool,
    new_hide_age: bool,
) -> list[_SayChange]:
    """What a write changes of the person's choices: each visibility given that differs, and hide_age."""
    changes = [
        _SayChange("visibility", event_type, old_choices.get(event_type) or "", visibility or "")
        for event_type, visibility in sorted(new_choices.items())
        if (old_choices.get(event_type) or "") != (visibility or "")
    ]
    if old_hide_age != new_hide_age:
        changes.append(_SayChange("hide_age", "", str(old_hide_age).lower(), str(new_hide_age).lower()))
    return changes


def _say_write(
    *,
    user_id: uuid.UUID,
    choices: dict[str, str | None],
    changes: list[_SayChange],
    changed_by: str,
    by: str,
    now: datetime,
) -> None:
    """Store the person's changed choices and the record of each change, in the caller's transaction.

    A visibility changed withdraws what it no longer allows and is not yet sent
    (scheduling.celebration.celebration_narrowed), in the same transaction.
    """
    if not changes:
        return
    if not changed_by:
        raise ValueError(
            "A change of a person's choices must say who makes it (scheduling.celebration.ChangedBy)."
        )
    changed_types = [change.event_type for change in changes if change.field == "visibility"]
    for event_type in changed_types:
        visibility = choices[event_type]
        if visibility is None:
            CelebrationChoice.objects.filter(user_id=user_id, event_type=event_type).delete()
        else:
            CelebrationChoice.objects.update_or_create(
                user_id=user_id, event_type=event_type, defaults={"visibility": visibility}
            )
    CelebrationChange.objects.bulk_create(
        [
            CelebrationChange(
                user_id=user_id,
                changed_at=now,
                changed_by=changed_by,
                actor=by if changed_by != ChangedBy.PERSON else "",
                **change._asdict(),
            )
            for change in changes
        ]
    )
    if changed_types:
        celebration_narrowed.send(sender=User, user_id=user_id, event_types=changed_types)
    logger.info(
        "Changed a person's choices",
        extra={"user_id": str(user_id), "changed_by": changed_by, "fields": [c.field for c in changes]},
    )


# --- end of the person's say ---


# --- the person's own page (people.page) ----------------------------------------------


@dataclass(frozen=True)
class IssuedLink:
    url: str
    expires_at: datetime


def personal_link_issue(*, user_id: uuid.UUID, issued_by: str, actor: str) -> IssuedLink:
    """A new link to the person's own page, for an operator or an HR system to send them; the one before is dead.

    The URL is given once, here: what is stored (the nonce) opens nothing without the signature,
    which only this server can make. `issued_by`: ChangedBy.OPERATOR or API_CLIENT, `actor` their
    username. User.DoesNotExist if the person is gone.
    """
    nonce = secrets.token_urlsafe(16)
    now = timezone.now()
    with transaction.atomic():
        # Under the person's row lock: two issues at once still leave one latest link, and an
        # erasure in progress is waited for (then DoesNotExist).
        User.objects.select_for_update(no_key=True).only("id").get(pk=user_id)
        PersonalLink.objects.create(
            user_id=user_id, nonce=nonce, issued_at=now, issued_by=issued_by, actor=actor
        )
    # TimestampSigner: the token carries when it was signed, and the reader refuses it after
    # PERSONAL_LINK_MAX_AGE_DAYS (users.selectors.personal_link_user).
    token = signing.TimestampSigner(salt=PERSONAL_LINK_SALT).sign(nonce)
    logger.info("Issued a personal link", extra={"user_id": str(user_id), "issued_by": issued_by})
    return IssuedLink(
        url=settings.PUBLIC_BASE_URL.rstrip("/") + reverse("people:page", kwargs={"token": token}),
        expires_at=now + timedelta(days=settings.PERSONAL_LINK_MAX_AGE_DAYS),
    )


class VersionMismatch(Exception):
    """The recipient was changed since the caller read it: its expected version is gone."""

    def __init__(self, *, current_version: int):
        super().__init__(f"The recipient is at version {current_version}.")
        self.current_version = current_version


def _lock_current(*, user: User, expected_versions: Collection[int] | None, no_key: bool = False) -> User:
    """The recipient's row as stored now, locked until the transaction ends.

    Raises User.DoesNotExist if it was deleted meanwhile, VersionMismatch if the
    caller expects versions the row is no longer at (None: any version will do).
    `no_key`: FOR NO KEY UPDATE, which every edit still waits for but the key-share
    lock of an insert referring to the row (the claim's next event) does not.
    """
    current = User.objects.select_for_update(no_key=no_key).get(pk=user.pk)
    if expected_versions is not None and current.version not in expected_versions:
        raise VersionMismatch(current_version=current.version)
    return current


def _clean_paused(value: object) -> bool:
    try:
        return clean_paused(value)
    except ValidationError as exc:
        raise ValidationError({"paused": exc.messages}) from None


def _pause_columns(*, user: User, paused: bool, by: str, now: datetime) -> list[str]:
    """Pause or resume the recipient's greetings on the instance; return the columns changed (none if already so).

    A pause starts a new span (scheduling.pauses); a resume ends it, keeping when it began.
    """
    if paused == user.paused:
        return []
    if paused:
        user.paused_at, user.paused_by = _pause_begun(by=by, now=now)
        user.resumed_at, user.resumed_by = None, ""
        return ["paused_at", "paused_by", "resumed_at", "resumed_by"]
    _require_actor(by)
    assert user.paused_at is not None  # paused: a pause has begun
    # Never before the pause began, whatever the clocks of two web hosts say.
    user.resumed_at, user.resumed_by = max(now, user.paused_at), by
    return ["resumed_at", "resumed_by"]


def _pause_begun(*, by: str, now: datetime) -> tuple[datetime, str]:
    """A new pause's paused_at and paused_by: for an existing recipient, a new one, or an imported row."""
    _require_actor(by)
    return now, by


def _require_actor(by: str) -> None:
    if not by:
        raise ValueError("A pause or resume must name who makes it.")


def user_update(
    *,
    user: User,
    data: dict[str, Any],
    expected_versions: Collection[int] | None = None,
    by: str = "",
    changed_by: str = "",
) -> User:
    """Apply a partial or full update and return the recipient as stored.

    The row is re-read under a lock and only the fields whose values change are
    written: two concurrent updates of different fields then apply one after the
    other, each to the other's result, so neither change is lost (writing every
    field from a copy read before the other update lost one of the two in 30 of
    30 concurrent rounds). Events are rescheduled from the result. `paused` in
    `data` pauses or resumes the recipient's greetings, recorded as made by `by`.
    `visibility` and hide_age changes are recorded as made by `changed_by` and `by`
    (scheduling.celebration.ChangedBy): "person" for the person's own page.
    """
    unknown = set(data) - {*USER_FIELDS, "paused", "visibility"}
    if unknown:
        raise ValueError(f"Unknown user fields: {', '.join(sorted(unknown))}")
    paused = _clean_paused(data["paused"]) if "paused" in data else None
    choices = _clean_visibility(data["visibility"]) if "visibility" in data else {}
    with transaction.atomic():
        current = _lock_current(user=user, expected_versions=expected_versions)
        merged = {field: data.get(field, getattr(current, field)) for field in USER_FIELDS}
        cleaned = clean_user_fields(merged)
        changed = [field for field in USER_FIELDS if cleaned[field] != getattr(current, field)]
        now = timezone.now()
        say_changes = _say_changes(
            old_choices=celebration_choices_of(user_id=current.id) if choices else {},
            new_choices=choices,
            old_hide_age=current.hide_age,
            new_hide_age=cleaned["hide_age"],
        )
        _say_write(
            user_id=current.id, choices=choices, changes=say_changes, changed_by=changed_by, by=by, now=now
        )
        if paused is not None:
            changed += _pause_columns(user=current, paused=paused, by=by, now=now)
        if "email" in changed and current.email_undeliverable_at is not None:
            # A new address has not been refused: it is tried again.
            current.email_undeliverable_at, current.email_undeliverable_reason = None, ""
            changed += ["email_undeliverable_at", "email_undeliverable_reason"]
        if changed or say_changes:
            said_before = age_said(current)
            for field in changed:
                if field in cleaned:
                    setattr(current, field, cleaned[field])
            current.version += 1
            with _external_id_taken_as(_taken_message(cleaned["external_id"])):
                current.save(update_fields=[*changed, "version", "updated_at"])
            if said_before and not age_said(current):
                # What is queued was rendered with their age: render it again without.
                age_unsaid.send(sender=User, user_id=current.id)
    logger.info("Updated user", extra={"user_id": str(current.id), "fields": changed})
    return current


def user_labels_change(*, user: User, add: Collection[str] = (), remove: Collection[str] = ()) -> bool:
    """Give the recipient the labels `add` and take `remove` away, under the row's lock (a label an edit gave
    meanwhile stays); whether their labels changed. The labels are checked by the one rule (clean_labels)."""
    with transaction.atomic():
        current = _lock_current(user=user, expected_versions=None)
        labels = sorted((set(current.labels) | set(add)) - set(remove))
        if labels == sorted(current.labels):
            return False
        user_update(user=current, data={"labels": labels})
    return True


# --- mentions ------------------------------------------------------------------------------------

MENTION_FIELD_NAMES = frozenset(field.name for field in MENTION_FIELDS)


def recipient_mentions_set(
    *, user: User, changes: Mapping[str, object], expected_versions: Collection[int] | None = None
) -> User:
    """Set the recipient's own chat user ids and mention consent (users.fields.MENTION_FIELDS), nothing else.

    For a page where the person sets them: any of slack_user_id, discord_user_id, teams_user_id and
    mention_consent, each by its field's rule; a bad one is a ValidationError naming it and nothing
    is stored. Any other field is refused (ValueError): this is no way to change a date or a name.
    """
    other = set(changes) - MENTION_FIELD_NAMES
    if other:
        raise ValueError(f"Not a mention field: {', '.join(sorted(other))}")
    return user_update(user=user, data=dict(changes), expected_versions=expected_versions)


def recipient_email_undeliverable_mark(
    *, email: str, reason: str, user_id: uuid.UUID | None = None, now: datetime | None = None
) -> int:
    """Mark `email` undeliverable on the recipients holding it now (`user_id`: on that one only); how many.

    A late bounce of an address since changed marks nothing: only a recipient whose current
    address is `email` (as users.validators.clean_email stores it, in any case) is marked. Idempotent: one
    already marked keeps the first time and reason.
    """
    try:
        normalised = clean_email(email)
    except ValidationError:
        return 0
    if not normalised:
        return 0
    # Without regard to case: relays and ESPs report the local part as they please, and no mailbox
    # provider tells two addresses apart by it.
    found = User.objects.filter(email__iexact=normalised, email_undeliverable_at__isnull=True).exclude(
        email=""
    )
    if user_id is not None:
        found = found.filter(pk=user_id)
    marked = found.update(
        email_undeliverable_at=now or timezone.now(),
        email_undeliverable_reason=reason[: User._meta.get_field("email_undeliverable_reason").max_length],
    )
    if marked:
        logger.info("Marked an email address undeliverable", extra={"recipients": marked, "reason": reason})
    return marked


def user_erase(*, user: User, expected_versions: Collection[int] | None = None) -> None:
    """Delete a recipient and every copy of their personal data, in one transaction (DELETE of the API).

    Locks first the recipient's row, without blocking the key-share lock a
    claim's insert of their next event takes. The apps above erase their rows
    about the events (users.signals.recipient_erasing: delivery's deliveries
    and attempts), then every event of theirs is locked (waiting for a claim
    that holds one to commit) and the apps above erase what such a claim
    added; nothing of theirs is created or moved after that. Then the
    occurrences a catch-up window could still reach, and that were handled
    (one still in progress only if its message may have reached a receiver),
    are remembered by a digest of the external id
    (scheduling.services.deleted_recipients), the console's
    log of the recipient and their events goes, and the events and the
    recipient are deleted.
    """
    with transaction.atomic():
        current = _lock_current(user=user, expected_versions=expected_versions, no_key=True)
        # The rows about the events before the events themselves: a worker recording
        # an outcome locks its delivery, then the event (taken the other way round,
        # the two waited for each other until PostgreSQL cancelled one).
        reached = _erase_rows_about_events(user_id=current.id)
        event_ids = list(
            Event.objects.select_for_update()
            .filter(user_id=current.id)
            .order_by("id")
            .values_list("id", flat=True)
        )
        # A claim that held one of the events has committed by now, with its delivery.
        reached |= _erase_rows_about_events(user_id=current.id)
        deleted_occurrences_record(
            user_id=current.id, external_id=current.external_id, now=timezone.now(), reached=reached
        )
        admin_log_forget(model=User, object_ids=[current.id])
        admin_log_forget(model=Event, object_ids=event_ids)
        Event.objects.filter(user_id=current.id).delete()
        current.delete()
    logger.info("Erased user", extra={"user_id": str(user.id), "events": len(event_ids)})


def _erase_rows_about_events(*, user_id: uuid.UUID) -> set[uuid.UUID]:
    """The apps above erase their rows about the recipient's events; return the events whose message may have gone."""
    reached: set[uuid.UUID] = set()
    for _receiver, event_ids in recipient_erasing.send(sender=User, user_id=user_id):
        # django-stubs type a receiver's response as str | None; it is whatever the receiver
        # returns, here (recipient_erasing's contract) a set of event ids or None.
        reached.update(event_ids or ())  # type: ignore[arg-type]
    return reached


# --- the bulk import ----------------------------------------------------------


def _import_row_changes(*, row: dict[str, Any], current: User) -> bool:
    """Whether an imported row changes the recipient it names: a field, or a visibility choice."""
    if any(value != getattr(current, field) for field, value in row.items() if field != "visibility"):
        return True
    chosen = row.get("visibility") or {}
    stored = celebration_choices_of(user_id=current.id) if chosen else {}
    return any(stored.get(event_type) != visibility for event_type, visibility in chosen.items())


class ImportedUserRow(NamedTuple):
    """A new recipient as the import writes it: its fields are the columns written.

    Its recipient's fields are users.fields.USER_FIELDS (users/tests/test_fields.py
    checks it), so it holds every field a handler reads (scheduling.handlers.Recipient)
    and the recipient's first events are computed from the row itself. Written
    out rather than built from the table: a type checker then knows its fields.
    """

    id: uuid.UUID
    first_name: str
    last_name: str
    date_of_birth: date
    timezone: str
    external_id: str | None
    anniversary_date: date | None
    send_time: time | None
    labels: list[str]
    language: str
    email: str
    # mentions (users.fields.MENTION_FIELDS)
    slack_user_id: str
    discord_user_id: str
    teams_user_id: str
    mention_consent: bool | None
    hide_age: bool
    created_at: datetime
    updated_at: datetime
    # A row imported paused: when and by whom, as a pause made through the API (None, "": not paused).
    paused_at: datetime | None
    paused_by: str


def users_bulk_create_with_events(
    *, rows: Iterable[dict[str, Any]], now: datetime | None = None, batch_size: int = 20000, by: str = ""
) -> int:
    """Create users and their first events in batches, bypassing signals.

    `rows` must already be cleaned (users.fields.clean_user_fields); an
    optional field a row lacks is stored as none (NULL, or no labels nor language). A row whose `paused` is true
    is created paused by `by` (as user_create's), not greeted. Each batch is one
    transaction holding both the users and their events, so a crash never
    leaves a user without its event. The events are computed by the same
    handlers as every other path. Returns how many users were created.

    Outside a transaction, a writer thread commits batch N over its own
    connection while this thread computes batch N+1 (otherwise Python and
    PostgreSQL take turns, each idle while the other works). At most one batch waits, and
    a failed batch stops the import with its error. Inside a transaction (the
    caller's, or a test's) every batch is written on the caller's connection.
    """
    now = now or timezone.now()
    writer = _ImportWriter(now=now, in_background=not connection.in_atomic_block)
    try:
        for users, choices in _user_batches(rows=rows, now=now, batch_size=batch_size, by=by):
            writer.write(
                users=users,
                events=_first_events(users=users, now=now),
                says=_imported_says(users=users, choices=choices, now=now, by=by),
            )
        return writer.wait()
    finally:
        writer.close()


def _user_batches(
    *, rows: Iterable[dict[str, Any]], now: datetime, batch_size: int, by: str
) -> Iterator[tuple[list[ImportedUserRow], list[dict[str, str | None]]]]:
    """The rows as new recipients, `batch_size` at a time, each read only when its batch is next;
    with each one's visibility choices (users.fields.clean_visibility), in the same order."""
    batch: list[ImportedUserRow] = []
    choices: list[dict[str, str | None]] = []
    # An optional field a row lacks, or has as None: what its cleaner makes of none (None, or
    # labels [], language ""). One value for every row: nothing alters a row once it is made.
    absent = {
        field.name: field.cleaned(None) for field in RECIPIENT_FIELDS if field.column and not field.required
    }
    for row in rows:
        if row.get("paused", False) is False:
            paused_at, paused_by = None, ""
        else:
            # user_create's rules: a flag that is a bool, a pause made by someone.
            _clean_paused(row["paused"])
            paused_at, paused_by = _pause_begun(by=by, now=now)
        batch.append(
            ImportedUserRow(
                id=uuid.uuid4(),
                **{name: absent[name] if row.get(name) is None else row[name] for name in USER_FIELDS},
                created_at=now,
                updated_at=now,
                paused_at=paused_at,
                paused_by=paused_by,
            )
        )
        choices.append(_clean_visibility(row.get("visibility") or {}))
        if len(batch) >= batch_size:
            yield batch, choices
            batch, choices = [], []
    if batch:
        yield batch, choices


class _ImportedSays(NamedTuple):
    """A batch's visibility choices and the record of each (and of each hide_age), as model rows to insert."""

    choices: list[CelebrationChoice]
    changes: list[CelebrationChange]


def _imported_says(
    *, users: list[ImportedUserRow], choices: list[dict[str, str | None]], now: datetime, by: str
) -> _ImportedSays:
    """The choices the new recipients come with, each recorded as made by the import (`by`)."""
    said = _ImportedSays([], [])
    for user, chosen in zip(users, choices, strict=True):
        for change in _say_changes(
            old_choices={}, new_choices=chosen, old_hide_age=False, new_hide_age=user.hide_age
        ):
            if change.field == "visibility":
                said.choices.append(
                    CelebrationChoice(
                        user_id=user.id, event_type=change.event_type, visibility=change.new_value
                    )
                )
            said.changes.append(
                CelebrationChange(
                    user_id=user.id, changed_at=now, changed_by=ChangedBy.IMPORT, actor=by, **change._asdict()
                )
            )
    return said


def _first_events(*, users: list[ImportedUserRow], now: datetime) -> list[PendingEventRow]:
    """Each new recipient's first occurrence of every event type, as a PENDING event.

    As events_create_first computes it: within the catch-up window, and after
    what a deleted recipient with the same external id was already given (one
    query a batch, none while nothing is remembered).
    """
    handled = deleted_occurrences_latest(
        external_ids=[user.external_id for user in users if user.external_id is not None], now=now
    )
    return first_pending_event_rows(recipients=users, now=now, handled=handled)


class _ImportWriter:
    """Commits the import's batches, each in a transaction of its own, and counts the users written.

    `in_background`: on a writer thread with its own connection, one batch
    behind the caller; otherwise on the caller's connection, at once.
    """

    def __init__(self, *, now: datetime, in_background: bool) -> None:
        self.now = now
        self.created = 0
        self.thread = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="import-writer") if in_background else None
        )
        self.pending: Future[int] | None = None

    def write(
        self, *, users: list[ImportedUserRow], events: list[PendingEventRow], says: _ImportedSays
    ) -> None:
        """Write a batch: at once inside a transaction, else once the previous batch is committed."""
        if self.thread is None:
            self.created += _write_user_batch(users, events, says, self.now)
            return
        if self.pending is not None:
            self.created += self.pending.result()  # backpressure, and errors surface here
        self.pending = self.thread.submit(_write_in_background, users, events, says, self.now)

    def wait(self) -> int:
        """Wait for the last batch to be committed; return how many users were created."""
        if self.pending is not None:
            self.created += self.pending.result()
            self.pending = None
        return self.created

    def close(self) -> None:
        if self.thread is not None:
            self.thread.shutdown(wait=True)


def _write_user_batch(
    user_rows: list[ImportedUserRow], event_rows: list[PendingEventRow], says: _ImportedSays, now: datetime
) -> int:
    with transaction.atomic():
        copy_rows(User, ImportedUserRow._fields, user_rows)
        copy_rows(Event, PendingEventRow._fields, event_rows, same_for_all=pending_event_defaults(now=now))
        # Few rows (only the people who chose): the ORM's multi-row INSERT, not COPY.
        CelebrationChoice.objects.bulk_create(says.choices)
        CelebrationChange.objects.bulk_create(says.changes)
    return len(user_rows)


def _write_in_background(
    user_rows: list[ImportedUserRow], event_rows: list[PendingEventRow], says: _ImportedSays, now: datetime
) -> int:
    try:
        return _write_user_batch(user_rows, event_rows, says, now)
    finally:
        connection.close()  # this thread's own connection


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0

    @property
    def total(self) -> int:
        return self.created + self.updated + self.unchanged


def _chunks(rows: Sequence[dict[str, Any]], size: int) -> Iterator[Sequence[dict[str, Any]]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


def users_import(
    *, rows: Sequence[dict[str, Any]], now: datetime | None = None, batch_size: int = 20000, by: str = ""
) -> ImportResult:
    """Create each row's recipient, or update the one that already has the row's external_id.

    `rows` are cleaned (users.fields.clean_user_fields), no external_id
    twice among them, and each holds only the fields to write: an update
    leaves a field the row lacks as stored. A row's `paused` (a bool) pauses
    or resumes the recipient's greetings as the API's does, recorded as made
    by `by` (who runs the import). Rows whose external_id no
    recipient has, and rows without one, take the bulk path
    (users_bulk_create_with_events). A row whose external_id exists goes
    through user_update, so its events are rescheduled exactly as an API
    edit's; a row equal to what is stored writes nothing.

    So an import that died part-way can simply run again: the rows of the
    batches it committed are found by their external_id and left as they
    are. If another writer creates one of the batch's external_ids after the
    batch looked them up (two imports of one file at once), the unique
    constraint refuses the batch whole: ExternalIdTaken, never a duplicate.
    """
    result = ImportResult()

    def new_rows() -> Iterator[dict[str, Any]]:
        # Looked up a batch at a time, while the writer thread commits the
        # previous batch's new rows; no external_id is in two batches.
        for chunk in _chunks(rows, batch_size):
            stored = users_by_external_id(
                external_ids=[row["external_id"] for row in chunk if row.get("external_id")]
            )
            for row in chunk:
                external_id = row.get("external_id")
                current = stored.get(external_id) if external_id else None
                if current is None:
                    yield row
                elif _import_row_changes(row=row, current=current):
                    user_update(user=current, data=row, by=by, changed_by=ChangedBy.IMPORT)
                    result.updated += 1
                else:
                    result.unchanged += 1

    with _external_id_taken_as(
        "A recipient with an external id of this batch was created by another writer (an import "
        "or API client at the same time) after the batch looked its ids up; the batch was not written."
    ):
        result.created = users_bulk_create_with_events(rows=new_rows(), now=now, batch_size=batch_size, by=by)
    return result
