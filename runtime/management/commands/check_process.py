from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from config.durations import parse_duration
from runtime.database import database_error_reason
from runtime.models import ProcessHeartbeat, ProcessKind
from runtime.selectors import process_liveness

# Exit codes: 0 fresh, 1 stale or missing (restart it), 2 cannot tell (the
# database is away: every process's heartbeat stops too, and restarting them
# would not help).
STALE = 1
UNKNOWN = 2


class Command(BaseCommand):
    help = (
        "Exit 0 if a scheduler or worker process wrote a heartbeat recently; 1 (one line on stderr) "
        "if none did; 2 if the database cannot be read. For systemd timers, supervisor and cron."
    )
    # A probe that runs every minute: it reads one table and needs no system checks.
    requires_system_checks = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--kind", required=True, choices=ProcessKind.values)
        parser.add_argument(
            "--max-age",
            type=parse_duration,
            default=f"{ProcessHeartbeat.LOST_AFTER_SECONDS}s",
            help="How old the newest heartbeat may be (60s, 2m...). Processes beat every 5 s. Default 60s.",
        )
        parser.add_argument("--host", help="Only processes on this host (as its hostname says).")
        parser.add_argument("--pid", type=int, help="Only the process with this id (with --host).")
        parser.add_argument(
            "--name", help="Only the process of this name (host:pid:random, as the console shows)."
        )
        parser.add_argument(
            "--min-count", type=int, default=1, help="How many fresh processes are needed. Default 1."
        )

    def handle(
        self,
        *args: Any,
        kind: str,
        max_age: timedelta,
        host: str | None,
        pid: int | None,
        name: str | None,
        min_count: int,
        **options: Any,
    ) -> None:
        which = " ".join(
            [
                kind,
                *(
                    f"{label}={value}"
                    for label, value in (("host", host), ("pid", pid), ("name", name))
                    if value
                ),
            ]
        )
        now = timezone.now()
        try:
            liveness = process_liveness(kind=kind, now=now, max_age=max_age, host=host, pid=pid, name=name)
        except DatabaseError as exc:
            raise CommandError(
                f"UNKNOWN {which}: cannot read heartbeats ({database_error_reason(exc)})", returncode=UNKNOWN
            ) from None
        window = f"{max_age.total_seconds():g} s"
        if liveness.fresh >= min_count:
            self.stdout.write(f"OK {which}: {liveness.fresh} process(es) with a heartbeat within {window}")
            return
        newest = liveness.newest
        if newest is None:
            last = "no heartbeat ever"
        else:
            state = "stopped" if newest.stopped_at else "silent"
            last = f"newest {newest.name} {state}, last seen {(now - newest.last_seen_at).total_seconds():.0f} s ago"
        raise CommandError(
            f"STALE {which}: {liveness.fresh} of {min_count} process(es) with a heartbeat within {window} ({last})",
            returncode=STALE,
        )
