"""The console's model admins, one module per app's models (admin autodiscovery imports this)."""

from console.admin import (
    celebration,
    deliveries,
    destinations,
    endpoints,
    events,
    pauses,
    recipients,
    templates,
)

__all__ = [
    "celebration",
    "deliveries",
    "destinations",
    "endpoints",
    "events",
    "pauses",
    "recipients",
    "templates",
]
