"""A destination's history to recover: deliveries ended at chosen instants, inside and outside a window."""

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, DeliveryStatus, Destination
from delivery.tests.pipeline import create_due_users
from scheduling.models import Event, EventStatus

DEAD, DELIVERED = DeliveryStatus.DEAD, DeliveryStatus.DELIVERED
TUESDAY_8 = datetime(2026, 11, 24, 8, 0, tzinfo=UTC)
WEDNESDAY_10 = datetime(2026, 11, 25, 10, 0, tzinfo=UTC)


def new_destination(name: str, **fields) -> Destination:
    return destination_create(
        settings=DestinationSettings(name=name, url=f"https://{name}.example.org/hook", **fields),
        operator="ops",
    ).destination


def two_destinations_with_queued_deliveries() -> tuple[Destination, Destination]:
    """crm and chat, each with a delivery queued for 12 occurrences (set WEBHOOK_URL empty first)."""
    crm, chat = new_destination("crm"), new_destination("chat")
    create_due_users(12)
    deliveries_enqueue_due(batch_size=100)
    return crm, chat


def end(deliveries, *, status: str, at: datetime) -> None:
    """The deliveries ended at `at`, as a worker's record leaves them (their events: events_ended)."""
    ids = [d.pk for d in deliveries]
    Delivery.objects.filter(pk__in=ids).update(
        status=status,
        updated_at=at,
        delivered_at=at if status == DELIVERED else None,
        last_error="" if status == DELIVERED else "HTTP 410",
    )


def events_ended() -> None:
    """Every event whose deliveries all ended: COMPLETED if all were delivered, else FAILED (as conclude does)."""
    for event in Event.objects.filter(status=EventStatus.PROCESSING):
        statuses = set(event.deliveries.values_list("status", flat=True))
        if statuses <= {DELIVERED}:
            Event.objects.filter(pk=event.pk).update(status=EventStatus.COMPLETED, executed_at=timezone.now())
        elif statuses <= {DELIVERED, DEAD}:
            Event.objects.filter(pk=event.pk).update(status=EventStatus.FAILED, failure_reason="dead")


def of(destination, **filters):
    return list(Delivery.objects.filter(destination=destination, **filters).order_by("id"))


def history_build() -> tuple[Destination, Destination, list[Delivery]]:
    """crm: 4 delivered inside the window, 2 before it, 2 after it, 2 dead inside, 2 dead before; chat: all
    12 delivered inside the window."""
    crm, chat = two_destinations_with_queued_deliveries()
    deliveries = of(crm)
    end(deliveries[:4], status=DELIVERED, at=TUESDAY_8 + timedelta(hours=1))
    end(deliveries[4:6], status=DELIVERED, at=TUESDAY_8 - timedelta(seconds=1))
    end(deliveries[6:8], status=DELIVERED, at=WEDNESDAY_10)  # the window's end is not in it
    end(deliveries[8:10], status=DEAD, at=TUESDAY_8)  # its start is
    end(deliveries[10:], status=DEAD, at=TUESDAY_8 - timedelta(days=1))
    end(of(chat), status=DELIVERED, at=TUESDAY_8 + timedelta(hours=2))
    events_ended()
    return crm, chat, deliveries
