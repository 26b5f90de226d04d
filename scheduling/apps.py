from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from scheduling import signals
        from scheduling.zonedata import zone_data

        signals.connect(app_config=self)
        # Which time zone database is in force, read before any zone is loaded:
        # an upgrade from now on is then a change zone_data_refresh sees.
        zone_data()
