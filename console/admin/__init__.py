"""The console's model admins, one module per app's models (admin autodiscovery imports this)."""

from console.admin import deliveries, destinations, endpoints, events, pauses, recipients, templates

__all__ = ["deliveries", "destinations", "endpoints", "events", "pauses", "recipients", "templates"]
