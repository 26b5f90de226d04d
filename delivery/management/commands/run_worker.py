from django.core.management.base import CommandError

from delivery.receivers.addresses import webhook_url_setting_check
from delivery.worker.loop import Worker
from runtime.commands import ProcessCommand


class Command(ProcessCommand):
    help = "Send due webhook deliveries until stopped (SIGTERM/SIGINT drains and exits 0)."
    what = "the worker"
    once_help = "Deliver everything due now, then exit."

    def add_process_arguments(self, parser):
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="Requests kept open to the receiver, fixed. Default: adapt to the receiver (slow start, "
            "halved on timeouts, 5xx and 429 or 503 with Retry-After), within WEBHOOK_MAX_IN_FLIGHT. "
            "Either way, a rate learnt from the receiver's 429s without Retry-After paces the starts.",
        )
        parser.add_argument(
            "--batch-size", type=int, default=200, help="Most deliveries claimed at once. Default 200."
        )

    def process(self, *, interval, once, stop, concurrency, batch_size, **options) -> Worker:
        if (concurrency is not None and concurrency < 1) or batch_size < 1:
            raise CommandError("--concurrency and --batch-size must be at least 1.")
        webhook_url_setting_check()
        return Worker(concurrency=concurrency, batch_size=batch_size, interval=interval, once=once, stop=stop)
