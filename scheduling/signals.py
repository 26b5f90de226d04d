"""Wiring only: user saves call the scheduling services."""

from django.db.models.signals import post_save

from scheduling.models import Event
from scheduling.services.sync import event_sync_for_user, events_create_first


def _sync_events_after_user_save(sender, instance, created: bool = False, raw: bool = False, **kwargs) -> None:
    if raw:  # loaddata: fixtures carry their own events
        return
    if created:
        events_create_first(user=instance)
    else:
        event_sync_for_user(user=instance)


def connect() -> None:
    # The recipient model, as the event's foreign key names it (scheduling does
    # not import the users app, which builds on it).
    post_save.connect(
        _sync_events_after_user_save,
        sender=Event._meta.get_field("user").related_model,
        dispatch_uid="scheduling.sync_user_events",
    )
