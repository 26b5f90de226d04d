import logging
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from delivery.worker import Worker
from runtime.database import DatabaseUnavailable
from runtime.metrics import MetricsPortUnavailable, metrics_served
from runtime.process import install_stop_signals

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Send due webhook deliveries until stopped (SIGTERM/SIGINT drains and exits 0)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--concurrency", type=int, default=None,
            help="Requests kept open to the receiver, fixed. Default: adapt to the receiver (slow start, "
            "halved on timeouts, 5xx and 429), within WEBHOOK_MAX_IN_FLIGHT.",
        )
        parser.add_argument("--batch-size", type=int, default=200, help="Most deliveries claimed at once. Default 200.")
        parser.add_argument("--interval", type=float, default=1.0, help="Longest idle sleep in seconds. Default 1.")
        parser.add_argument(
            "--metrics-port", type=int, default=settings.METRICS_PORT,
            help="Serve this process's Prometheus metrics on this port (METRICS_PORT; 0: do not).",
        )
        parser.add_argument("--once", action="store_true", help="Deliver everything due now, then exit.")

    def handle(self, *args, concurrency, batch_size, interval, once, metrics_port, **options):
        if not settings.WEBHOOK_URL:
            raise CommandError("WEBHOOK_URL is not set: the worker has nowhere to deliver to.")
        if (concurrency is not None and concurrency < 1) or batch_size < 1 or interval <= 0:
            raise CommandError("--concurrency and --batch-size must be at least 1, --interval above 0.")
        if not 0 <= metrics_port <= 65535:
            raise CommandError("--metrics-port must be a port number (0: no metrics).")
        stop = threading.Event()
        restore_signals = install_stop_signals(stop, what="the worker")
        try:
            with metrics_served(port=metrics_port, address=settings.METRICS_ADDRESS) as server:
                if server is not None:
                    logger.info("Serving metrics on http://%s:%s/metrics", settings.METRICS_ADDRESS, metrics_port)
                Worker(concurrency=concurrency, batch_size=batch_size, interval=interval, once=once, stop=stop).run()
        except DatabaseUnavailable as exc:
            # A --once run (cron, tests) that cannot reach PostgreSQL: one line, exit 1.
            raise CommandError(str(exc).splitlines()[0]) from None
        except MetricsPortUnavailable as exc:
            raise CommandError(str(exc)) from None
        finally:
            restore_signals()
