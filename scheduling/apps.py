from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from scheduling import signals
        from scheduling.zonedata import zone_data

        _check_catch_up_windows()
        signals.connect(app_config=self)
        # Which time zone database is in force, read before any zone is loaded:
        # an upgrade from now on is then a change zone_data_refresh sees.
        zone_data()


def _check_catch_up_windows() -> None:
    """Stop every process at start-up on a catch-up window for an event type that does not exist."""
    from scheduling.handlers import REGISTRY

    unknown = sorted(set(settings.EVENT_CATCH_UP_WINDOW_BY_TYPE) - set(REGISTRY))
    if unknown:
        raise ImproperlyConfigured(
            f"EVENT_CATCH_UP_WINDOW_BY_TYPE names {', '.join(unknown)}, which is no event type; "
            f"the types are {', '.join(REGISTRY)}."
        )
