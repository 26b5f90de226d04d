"""Wiring only: user saves and migrate call the scheduling services."""

from collections.abc import Callable

from django.apps import AppConfig
from django.apps import apps as global_apps
from django.db.models.signals import post_migrate, post_save

from scheduling.models import Event
from scheduling.services.messages import message_templates_create_missing
from scheduling.services.pauses import event_type_pauses_create_missing
from scheduling.services.sync import event_sync_for_user, events_create_first


def _sync_events_after_user_save(
    sender, instance, created: bool = False, raw: bool = False, **kwargs
) -> None:
    if raw:  # loaddata: fixtures carry their own events
        return
    if created:
        # What the API renders as next_event and next_events (users.serializers), without a read.
        instance.pending_events = events_create_first(user=instance)
    else:
        event_sync_for_user(user=instance)


# `apps` is the migration state's after migrate; flush (which test cases run)
# sends none, and the installed models are the state then.
def _create_missing_message_templates(sender, using: str, apps=global_apps, **kwargs) -> None:
    _rows_create_missing(
        apps, "MessageTemplate", create_missing=message_templates_create_missing, using=using
    )


def _create_missing_event_type_pauses(sender, using: str, apps=global_apps, **kwargs) -> None:
    _rows_create_missing(apps, "EventTypePause", create_missing=event_type_pauses_create_missing, using=using)


def _rows_create_missing(apps, model_name: str, *, create_missing: Callable[..., None], using: str) -> None:
    """Call `create_missing` with scheduling's model of that name as `apps` has it, if it has it yet."""
    try:
        model = apps.get_model("scheduling", model_name)
    except LookupError:  # migrated back to before the table existed
        return
    create_missing(model=model, using=using)


def connect(*, app_config: AppConfig) -> None:
    # The recipient model, as the event's foreign key names it (scheduling does
    # not import the users app, which builds on it).
    post_save.connect(
        _sync_events_after_user_save,
        sender=Event._meta.get_field("user").related_model,
        dispatch_uid="scheduling.sync_user_events",
    )
    post_migrate.connect(
        _create_missing_message_templates, sender=app_config, dispatch_uid="scheduling.message_templates"
    )
    post_migrate.connect(
        _create_missing_event_type_pauses, sender=app_config, dispatch_uid="scheduling.event_type_pauses"
    )
