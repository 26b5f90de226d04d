"""Wiring only: a recipient's erase and export, and a narrower visibility, reach the deliveries through signals."""

from django.apps import AppConfig
from django.utils import timezone

from delivery.dispatch.withdraw import deliveries_rerender_without_age, deliveries_withdraw_uncelebrated
from delivery.erasure import deliveries_erase
from delivery.selectors import deliveries_export, destination_opt_outs_export, digests_export
from scheduling.celebration import age_unsaid, celebration_narrowed
from users.models import User
from users.signals import recipient_erasing, recipient_exporting


def _erase_deliveries(sender, user_id, **kwargs) -> set:
    return deliveries_erase(user_id=user_id)


def _export_deliveries(sender, user_id, event_ids, **kwargs) -> dict:
    return {
        "deliveries": deliveries_export(event_ids=event_ids),
        "digests": digests_export(user_id=user_id),
        "destination_opt_outs": destination_opt_outs_export(user_id=user_id),
    }


def _withdraw_uncelebrated(sender, user_id, event_types, **kwargs) -> int:
    return deliveries_withdraw_uncelebrated(user_id=user_id, event_types=event_types, now=timezone.now())


def _rerender_without_age(sender, user_id, **kwargs) -> int:
    return deliveries_rerender_without_age(user_id=user_id)


def connect(*, app_config: AppConfig) -> None:
    age_unsaid.connect(_rerender_without_age, sender=User, dispatch_uid="delivery.rerender_without_age")
    celebration_narrowed.connect(_withdraw_uncelebrated, dispatch_uid="delivery.withdraw_uncelebrated")
    recipient_erasing.connect(_erase_deliveries, sender=User, dispatch_uid="delivery.erase")
    recipient_exporting.connect(_export_deliveries, sender=User, dispatch_uid="delivery.export")
