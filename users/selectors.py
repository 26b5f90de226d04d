from collections.abc import Collection

from django.db import connection
from django.db.models import Prefetch, QuerySet

from scheduling.models import Event, EventStatus
from scheduling.selectors import event_list_for_user
from users.models import User


def user_list(*, external_id: str | None = None) -> QuerySet[User]:
    """Users with their pending events prefetched (for `next_event`, no N+1).

    With `external_id`, only the recipient holding it (trimmed, as stored); a
    blank one matches nobody, as no recipient's id is blank.
    """
    users = User.objects.all()
    if external_id is not None:
        # No stored id holds NUL (PostgreSQL text cannot), and a query holding
        # one could not even be sent.
        users = users.filter(external_id=external_id.strip()) if "\x00" not in external_id else users.none()
    return users.order_by("created_at", "id").prefetch_related(
        Prefetch(
            "events",
            queryset=Event.objects.filter(status=EventStatus.PENDING).order_by(
                "target_timestamp_utc"
            ),
            to_attr="pending_events",
        )
    )


def user_events(*, user_id) -> QuerySet[Event]:
    """A user's events, newest first, each with its delivery (for retry_count), in one query."""
    return event_list_for_user(user_id=user_id).select_related("delivery")


def users_by_external_id(*, external_ids: Collection[str]) -> dict[str, User]:
    """The recipients holding these external ids, by id (one index probe each)."""
    if not external_ids:
        return {}
    return {user.external_id: user for user in User.objects.filter(external_id__in=external_ids)}


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
