from django.db.models import Prefetch, QuerySet

from scheduling.models import Event, EventStatus
from scheduling.selectors import event_list_for_user
from users.models import User


def user_list() -> QuerySet[User]:
    """Users with their pending events prefetched (for `next_event`, no N+1)."""
    return User.objects.order_by("created_at", "id").prefetch_related(
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
