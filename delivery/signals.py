"""Wiring only: a recipient's erase and export reach the deliveries through the users app's signals."""

from django.apps import AppConfig

from delivery.erasure import deliveries_erase
from delivery.selectors import deliveries_export, digests_export
from users.models import User
from users.signals import recipient_erasing, recipient_exporting


def _erase_deliveries(sender, user_id, **kwargs) -> set:
    return deliveries_erase(user_id=user_id)


def _export_deliveries(sender, user_id, event_ids, **kwargs) -> dict:
    return {"deliveries": deliveries_export(event_ids=event_ids), "digests": digests_export(user_id=user_id)}


def connect(*, app_config: AppConfig) -> None:
    recipient_erasing.connect(_erase_deliveries, sender=User, dispatch_uid="delivery.erase")
    recipient_exporting.connect(_export_deliveries, sender=User, dispatch_uid="delivery.export")
