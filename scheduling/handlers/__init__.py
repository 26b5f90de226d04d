"""The event-type registry: adding a type means one new module and one line here."""

from scheduling.event_types import EventType
from scheduling.handlers.anniversary import AnniversaryHandler
from scheduling.handlers.base import (
    EventHandler,
    Occurrence,
    Recipient,
    RecipientRow,
    local_send_instant,
)
from scheduling.handlers.birthday import BirthdayHandler

REGISTRY: dict[str, EventHandler] = {
    EventType.BIRTHDAY: BirthdayHandler(),
    EventType.ANNIVERSARY: AnniversaryHandler(),
}


def get_handler(event_type: str) -> EventHandler:
    try:
        return REGISTRY[event_type]
    except KeyError:
        raise LookupError(f"No handler registered for event type {event_type!r}") from None


__all__ = [
    "REGISTRY",
    "EventHandler",
    "Occurrence",
    "Recipient",
    "RecipientRow",
    "get_handler",
    "local_send_instant",
]
