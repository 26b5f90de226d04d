from django.core.management.base import CommandError

from delivery.dispatch.scheduler import Scheduler
from delivery.receivers.addresses import webhook_url_setting_check
from runtime.commands import ProcessCommand


class Command(ProcessCommand):
    help = "Claim due events and queue their deliveries until stopped (SIGTERM/SIGINT exits 0)."
    what = "the scheduler"
    once_help = "Claim everything due now, reconcile and prune once, then exit."

    def add_process_arguments(self, parser):
        parser.add_argument(
            "--batch-size", type=int, default=500, help="Most events claimed per transaction."
        )
        parser.add_argument(
            "--claimers",
            type=int,
            default=2,
            help="Threads that claim side by side when a backlog is due (each holds a connection). Default 2.",
        )

    def process(self, *, interval, once, stop, batch_size, claimers, **options) -> Scheduler:
        if batch_size < 1 or claimers < 1:
            raise CommandError("--batch-size and --claimers must be at least 1.")
        # WEBHOOK_URL seeds the default destination: one the worker would refuse would only go DEAD.
        webhook_url_setting_check()
        return Scheduler(batch_size=batch_size, claimers=claimers, interval=interval, once=once, stop=stop)
