"""Wiring only: user saves call the scheduling services."""

from django.db.models.signals import post_save

from scheduling.services.sync import event_sync_for_user, events_create_first
from users.models import User


def _sync_events_after_user_save(sender, instance, created: bool = False, raw: bool = False, **kwargs) -> None:
    if raw:  # loaddata: fixtures carry their own events
        return
    if created:
        events_create_first(user=instance)
    else:
        event_sync_for_user(user=instance)


def connect() -> None:
    post_save.connect(_sync_events_after_user_save, sender=User, dispatch_uid="scheduling.sync_user_events")
