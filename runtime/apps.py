from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """What every long-running process shares: heartbeats, wake-ups, outage handling."""

    name = "runtime"
    verbose_name = "Processes"
