"""The console's model admins, one module per app's models (admin autodiscovery imports this)."""

from console.admin import deliveries, endpoints, events, pauses, recipients, templates

__all__ = ["deliveries", "endpoints", "events", "pauses", "recipients", "templates"]
