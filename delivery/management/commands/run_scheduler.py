import logging
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from delivery.scheduler import Scheduler
from runtime.database import DatabaseUnavailable
from runtime.metrics import MetricsPortUnavailable, metrics_served
from runtime.process import install_stop_signals

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Claim due events and queue their deliveries until stopped (SIGTERM/SIGINT exits 0)."

    def add_arguments(self, parser):
        parser.add_argument("--batch-size", type=int, default=500, help="Most events claimed per transaction.")
        parser.add_argument(
            "--claimers", type=int, default=2,
            help="Threads that claim side by side when a backlog is due (each holds a connection). Default 2.",
        )
        parser.add_argument(
            "--interval", type=float, default=1.0, help="Longest sleep in seconds between looks. Default 1."
        )
        parser.add_argument(
            "--metrics-port", type=int, default=settings.METRICS_PORT,
            help="Serve this process's Prometheus metrics on this port (METRICS_PORT; 0: do not).",
        )
        parser.add_argument("--once", action="store_true", help="Claim everything due now, then exit.")

    def handle(self, *args, batch_size, claimers, interval, once, metrics_port, **options):
        if not settings.WEBHOOK_URL:
            raise CommandError("WEBHOOK_URL is not set: queued deliveries would have nowhere to go.")
        if batch_size < 1 or claimers < 1 or interval <= 0:
            raise CommandError("--batch-size and --claimers must be at least 1, --interval above 0.")
        if not 0 <= metrics_port <= 65535:
            raise CommandError("--metrics-port must be a port number (0: no metrics).")
        stop = threading.Event()
        restore_signals = install_stop_signals(stop, what="the scheduler")
        try:
            with metrics_served(port=metrics_port, address=settings.METRICS_ADDRESS) as server:
                if server is not None:
                    logger.info("Serving metrics on http://%s:%s/metrics", settings.METRICS_ADDRESS, metrics_port)
                Scheduler(batch_size=batch_size, claimers=claimers, interval=interval, once=once, stop=stop).run()
        except DatabaseUnavailable as exc:
            # A --once run (cron, tests) that cannot reach PostgreSQL: one line, exit 1.
            raise CommandError(str(exc).splitlines()[0]) from None
        except MetricsPortUnavailable as exc:
            raise CommandError(str(exc)) from None
        finally:
            restore_signals()
