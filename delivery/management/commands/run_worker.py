import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from delivery.worker import Worker
from runtime.database import DatabaseUnavailable
from runtime.process import install_stop_signals


class Command(BaseCommand):
    help = "Send due webhook deliveries until stopped (SIGTERM/SIGINT drains and exits 0)."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=8, help="Parallel sends (threads). Default 8.")
        parser.add_argument("--batch-size", type=int, default=200, help="Most deliveries claimed at once. Default 200.")
        parser.add_argument("--interval", type=float, default=1.0, help="Longest idle sleep in seconds. Default 1.")
        parser.add_argument("--once", action="store_true", help="Deliver everything due now, then exit.")

    def handle(self, *args, concurrency, batch_size, interval, once, **options):
        if not settings.WEBHOOK_URL:
            raise CommandError("WEBHOOK_URL is not set: the worker has nowhere to deliver to.")
        if concurrency < 1 or batch_size < 1 or interval <= 0:
            raise CommandError("--concurrency and --batch-size must be at least 1, --interval above 0.")
        stop = threading.Event()
        restore_signals = install_stop_signals(stop, what="the worker")
        try:
            Worker(concurrency=concurrency, batch_size=batch_size, interval=interval, once=once, stop=stop).run()
        except DatabaseUnavailable as exc:
            # A --once run (cron, tests) that cannot reach PostgreSQL: one line, exit 1.
            raise CommandError(str(exc).splitlines()[0]) from None
        finally:
            restore_signals()
