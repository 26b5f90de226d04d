from collections.abc import Collection

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
