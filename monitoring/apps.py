from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    """Health checks for load balancers and the database-wide Prometheus metrics."""

    name = "monitoring"
    verbose_name = "Monitoring"
