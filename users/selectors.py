import re
import uuid
from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core import signing
from django.db import connection
from django.db.models import OuterRef, Prefetch, Q, QuerySet, Subquery
from django.utils import timezone
from django.utils.text import smart_split, unescape_string_literal

from scheduling.admin_log import admin_log_export
from scheduling.celebration import Visibility, age_said, visibility_of
from scheduling.handlers import get_handler
from scheduling.models import Event, EventStatus
from scheduling.selectors import celebration_defaults, event_list_for_user, message_choice, message_templates
from users.models import CelebrationChange, CelebrationChoice, PersonalLink, User
from users.signals import recipient_exporting


def user_list(*, external_id: str | None = None, labels: Collection[str] = ()) -> QuerySet[User]:
    """Users with their pending events prefetched (for `next_event`, no N+1).

    With `external_id`, only the recipient holding it (trimmed, as stored); a
    blank one matches nobody, as no recipient's id is blank. With `labels`, only
    the recipients holding every one of them (user_labels_filter).
    """
    users = User.objects.all()
    if external_id is not None:
        # No stored id holds NUL (PostgreSQL text cannot), and a query holding
        # one could not even be sent.
        users = users.filter(external_id=external_id.strip()) if "\x00" not in external_id else users.none()
    if labels:
        users = users.filter(user_labels_filter(labels=labels))
    return users.order_by("created_at", "id").prefetch_related(
        "celebration_choices",
        Prefetch(
            "events",
            queryset=Event.objects.filter(status=EventStatus.PENDING).order_by("target_timestamp_utc"),
            to_attr="pending_events",
        ),
    )


def user_labels_filter(*, labels: Collection[str]) -> Q:
    """The recipients holding every one of `labels` (in any case, as labels are stored lowercase).

    Each label given narrows, as a filter bar's terms do; a destination's audience,
    which takes anyone with any of its labels, is delivery.destinations.audience's. `labels @>`
    is served by the GIN index on labels (user_labels_idx). A label no recipient
    can hold (not by the grammar) matches nobody rather than being an error: a
    filter answers "who has it", and the answer is no one.
    """
    if any("\x00" in label for label in labels):  # no label holds NUL; a query with one cannot be sent
        return Q(pk__in=[])
    return Q(labels__contains=sorted({label.strip().lower() for label in labels}))


# pg_trgm indexes every run of three letters or digits in a name. A word with no
# such run has no trigram to look up, and matching it anywhere in a name would
# read every recipient; it matches the start of a name instead, which the same
# index serves (pg_trgm pads the start of each name).
HAS_TRIGRAM = re.compile(r"[^\W_]{3}")


def user_search_filter(*, term: str, via: str = "") -> Q:
    """The recipients an operator's search finds: each word of `term` in a first or last name, or a whole external id.

    Words are split as the admin splits them (quotes keep a phrase whole), and
    every word must match. Served by the names' trigram indexes and the unique
    index on external_id (users.models), so a search reads the recipients that
    match, never all of them. An external id matches exactly, case included:
    it is the client's id, not text to search in. `via` is the path to the
    recipient from the model searched ("user__" from events).
    """
    condition = Q()
    for word in smart_split(term):
        if word[0] in "\"'" and word[0] == word[-1]:
            word = unescape_string_literal(word)
        lookup = "icontains" if HAS_TRIGRAM.search(word) else "istartswith"
        condition &= (
            Q(**{f"{via}first_name__{lookup}": word})
            | Q(**{f"{via}last_name__{lookup}": word})
            | Q(**{f"{via}external_id": word})
        )
    return condition


# How many recipients a search of the events by name gathers the events of. Their
# events are read recipient by recipient through the (user, type, date) index, so the
# read is bounded by this, never by how many events there are. Asked as one join,
# PostgreSQL guesses from the trigrams how many recipients match (for "First1234" every
# "First" counts) and, with the list's ORDER BY id LIMIT, walks the whole event table
# hoping to meet them; a rare name then reads all of the history.
SEARCH_RECIPIENTS_BOUND = 1_000


def user_ids_found(*, term: str, bound: int) -> tuple[list[uuid.UUID], bool]:
    """The ids of at most `bound` recipients an operator's search finds, and whether it found more."""
    # No ORDER BY: under a LIMIT, an order would have PostgreSQL walk that order's index
    # in search of the matches, the very trap this avoids.
    found = list(
        User.objects.filter(user_search_filter(term=term))
        .order_by()
        .values_list("id", flat=True)[: bound + 1]
    )
    return found[:bound], len(found) > bound


def user_export(*, user_id: uuid.UUID) -> dict[str, Any]:
    """Everything stored about one recipient, as JSON-ready values (the API's export).

    Every column of their row, of each of their events, and, from the apps
    above (users.signals.recipient_exporting), of each delivery and attempt;
    and the console's log of them. Rows as stored, not as the API renders them.
    """
    recipient = User.objects.values().get(pk=user_id)
    events = list(Event.objects.filter(user_id=user_id).order_by("occurrence_date", "event_type").values())
    event_ids = [event["id"] for event in events]
    export: dict[str, Any] = {
        "exported_at": timezone.now(),
        "recipient": recipient,
        # Their own visibility per event type, and the record of each change of their choices.
        "celebration_choices": list(
            CelebrationChoice.objects.filter(user_id=user_id)
            .order_by("event_type")
            .values("event_type", "visibility")
        ),
        "celebration_changes": list(
            CelebrationChange.objects.filter(user_id=user_id)
            .order_by("changed_at", "id")
            .values(
                "changed_at",
                "changed_by",
                "actor",
                "field",
                "event_type",
                "destination_id",
                "destination_name",
                "old_value",
                "new_value",
            )
        ),
        # The links to their own page issued for them: when, by whom (never the link itself).
        "personal_links": list(
            PersonalLink.objects.filter(user_id=user_id)
            .order_by("issued_at", "id")
            .values("issued_at", "issued_by", "actor")
        ),
        "console_log": admin_log_export(model=User, object_ids=[user_id]),
        "events": [
            {**event, "console_log": admin_log_export(model=Event, object_ids=[event["id"]])}
            for event in events
        ],
    }
    for _receiver, sections in recipient_exporting.send(sender=User, user_id=user_id, event_ids=event_ids):
        # django-stubs type a receiver's response as str | None; it is whatever the
        # receiver returns, here (recipient_exporting's contract) a dict of sections.
        export.update(sections)  # type: ignore[arg-type]
    return export


def user_events(*, user_id: uuid.UUID) -> QuerySet[Event]:
    """A user's events, newest first, each with its deliveries (for retry_count), in two queries."""
    return event_list_for_user(user_id=user_id).prefetch_related("deliveries")


def users_by_external_id(*, external_ids: Collection[str]) -> dict[str, User]:
    """The recipients holding these external ids, by id (one index probe each)."""
    if not external_ids:
        return {}
    return {
        user.external_id: user
        for user in User.objects.filter(external_id__in=external_ids)
        if user.external_id is not None  # always: it is one of external_ids
    }


def user_timezones_in_use() -> list[str]:
    """The time zones some recipient has, in order: one probe of user_timezone_idx per zone.

    A recursive query that jumps from each zone to the next one in the index
    (a "loose index scan"), so it costs the few hundred zones in use, not the
    recipients: SELECT DISTINCT would read an index entry per recipient.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH RECURSIVE zones(zone) AS (
                (SELECT timezone FROM users_user ORDER BY timezone LIMIT 1)
                UNION ALL
                SELECT (SELECT u.timezone FROM users_user u WHERE u.timezone > z.zone ORDER BY u.timezone LIMIT 1)
                FROM zones z WHERE z.zone IS NOT NULL
            )
            SELECT zone FROM zones WHERE zone IS NOT NULL
            """
        )
        return [zone for (zone,) in cursor.fetchall()]


# --- the person's say (scheduling.celebration) ---


@dataclass(frozen=True)
class RecipientMessage:
    """The text one pending occurrence of a recipient's will be sent with, as the console shows it."""

    event_type: str
    visibility: str
    text: str
    # Why this text: their age not said (a fallback), or nothing sent at all.
    note: str


def recipient_messages(*, user: User) -> list[RecipientMessage]:
    """Each pending occurrence's text as the scheduler would render it now (the templates', not a
    destination's own), with the visibility in force and why a text without the age was chosen."""
    templates = message_templates()
    defaults = celebration_defaults()
    choices = dict(user.celebration_choices.values_list("event_type", "visibility"))
    rows = []
    for event in Event.objects.filter(user_id=user.pk, status=EventStatus.PENDING).order_by(
        "target_timestamp_utc"
    ):
        handler = get_handler(event.event_type)
        visibility = visibility_of(choices.get(event.event_type), default=defaults.get(event.event_type))
        text = message_choice(templates=templates, occasion=event, user=user, language=user.language).text
        notes = []
        if visibility == Visibility.NONE:
            notes.append("Not celebrated: nothing is sent.")
        if handler.age_placeholders and not age_said(user):
            why = "they chose never to have it said" if user.hide_age else "their birthday has no year"
            notes.append(f"No age is said ({why}): texts using {{age}} are passed over for one without.")
        rows.append(RecipientMessage(event.event_type, visibility, text, " ".join(notes)))
    return rows


# --- the person's own page (people.page) ---

# The signature's salt: a token signed for anything else (an unsubscribe link) opens no page.
PERSONAL_LINK_SALT = "users.personal-link"


def personal_link_user(*, token: str) -> User | None:
    """The person a link to their own page opens, or None: a token not signed here, expired, not their
    latest link (revoked by a newer one), or of a person erased. Callers answer every None alike."""
    try:
        nonce = signing.TimestampSigner(salt=PERSONAL_LINK_SALT).unsign(
            token, max_age=timedelta(days=settings.PERSONAL_LINK_MAX_AGE_DAYS)
        )
    except signing.BadSignature:  # SignatureExpired included
        return None
    latest = (
        PersonalLink.objects.filter(user_id=OuterRef("user_id"))
        .order_by("-issued_at", "-id")
        .values("nonce")[:1]
    )
    link = (
        PersonalLink.objects.filter(nonce=nonce)
        .annotate(latest=Subquery(latest))
        .select_related("user")
        .first()
    )
    if link is None or link.latest != nonce:
        return None
    return link.user
