import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from delivery.dispatch.retention import (
    NO_PRUNE,
    PRUNE_BATCH_SIZE,
    PRUNE_REST,
    PruneTotals,
    history_cutoff,
    history_prune_batches,
)

# Seconds between progress lines (every batch with --verbosity 2).
_PROGRESS_EVERY = 5.0


def _counts(totals: PruneTotals) -> str:
    return f"{totals.events:,} events, {totals.deliveries:,} deliveries, {totals.attempts:,} attempts"


class Command(BaseCommand):
    help = (
        "Delete COMPLETED and FAILED events older than HISTORY_RETENTION (by target time) with their "
        "deliveries and attempts, in batches; each recipient's latest handled occurrence per type stays."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--batch-size",
            type=int,
            default=PRUNE_BATCH_SIZE,
            help=f"Events per batch, each batch one transaction. Default {PRUNE_BATCH_SIZE}.",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Count what would be deleted, per table; delete nothing."
        )
        parser.add_argument(
            "--rest",
            type=float,
            default=PRUNE_REST,
            help=f"After each batch, rest this many times as long as it took, so that schedulers claiming at "
            f"the same time keep their pace (0: no rest). Default {PRUNE_REST}.",
        )

    def handle(self, *args, batch_size, dry_run, rest, verbosity, **options):
        if batch_size < 1 or rest < 0:
            raise CommandError("--batch-size must be at least 1, --rest at least 0.")
        cutoff = history_cutoff(now=timezone.now())
        self.stdout.write(
            f"{'Counting' if dry_run else 'Deleting'} COMPLETED and FAILED events with a target before "
            f"{cutoff.isoformat()} (HISTORY_RETENTION {settings.HISTORY_RETENTION}), {batch_size} per batch."
        )
        totals = NO_PRUNE
        started = reported = time.monotonic()
        for batch in history_prune_batches(cutoff=cutoff, batch_size=batch_size, dry_run=dry_run, rest=rest):
            totals = totals.plus(batch)
            now = time.monotonic()
            if verbosity >= 2 or now - reported >= _PROGRESS_EVERY:
                reported = now
                self.stdout.write(
                    f"  {totals.batches:,} batches: {_counts(totals)} ({totals.rows / (now - started):,.0f} rows/s)"
                )
        seconds = time.monotonic() - started
        self.stdout.write(
            f"{'Would delete' if dry_run else 'Deleted'} {_counts(totals)} "
            f"in {totals.batches:,} batches, {seconds:.1f} s."
        )
