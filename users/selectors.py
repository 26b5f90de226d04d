from django.db.models import Prefetch, QuerySet

from scheduling.models import Event, EventStatus
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
