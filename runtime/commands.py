"""The shared part of the long-running commands (run_scheduler, run_worker): options, signals, metrics port."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime.database import DatabaseUnavailable
from runtime.heap import heap_settled
from runtime.loop import ProcessLoop
from runtime.metrics import MetricsPortUnavailable, metrics_served
from runtime.process import install_stop_signals

logger = logging.getLogger(__name__)


class ProcessCommand(BaseCommand):
    """Runs one ProcessLoop until SIGTERM/SIGINT (exit 0), or once with --once.

    A subclass names what it runs (`what`, for the log), adds its own options
    and builds its loop from them in `process`; everything else is here, once.
    """

    what: str
    once_help: str
    # The system checks of what these processes use (the models, the caches, the database, the settings'
    # compatibility), not those of the web's parts: checking the URLs imports the URLconf,
    # the API and the console, a good part of a worker's time to its first delivery
    # (bench/results/REPORT-queued.md), and neither process serves a request or a page.
    # `manage.py migrate` (the web unit runs it before it starts) and `manage.py check` run
    # every check.
    requires_system_checks = [Tags.models, Tags.caches, Tags.compatibility, Tags.database]

    def add_process_arguments(self, parser: CommandParser) -> None:
        """The subclass's own options."""

    def process(self, *args: Any, **options: Any) -> ProcessLoop:
        """The loop to run, from the validated options; raise CommandError for a bad one.

        Called with `interval`, `once`, `stop` and the subclass's own options, by keyword;
        each subclass names the ones it takes (so the signature here takes any).
        """
        raise NotImplementedError

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_process_arguments(parser)
        parser.add_argument(
            "--interval",
            type=float,
            default=1.0,
            help="Longest sleep in seconds between looks for work when idle. Default 1.",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            default=settings.METRICS_PORT,
            help="Serve this process's Prometheus metrics on this port (METRICS_PORT; 0: do not).",
        )
        parser.add_argument("--once", action="store_true", help=self.once_help)

    def handle(self, *args: Any, interval: float, once: bool, metrics_port: int, **options: Any) -> None:
        if interval <= 0:
            raise CommandError("--interval must be above 0.")
        if not 0 <= metrics_port <= 65535:
            raise CommandError("--metrics-port must be a port number (0: no metrics).")
        stop = threading.Event()
        restore_signals = install_stop_signals(stop, what=self.what)
        try:
            loop = self.process(interval=interval, once=once, stop=stop, **options)
            with metrics_served(port=metrics_port, address=settings.METRICS_ADDRESS) as server:
                if server is not None:
                    logger.info(
                        "Serving metrics on http://%s:%s/metrics", settings.METRICS_ADDRESS, metrics_port
                    )
                # Built and started: what the process holds now lives as long as it (runtime.heap).
                with heap_settled():
                    loop.run()
        except DatabaseUnavailable as exc:
            # A --once run (cron, tests) that cannot reach PostgreSQL: one line, exit 1.
            raise CommandError(str(exc).splitlines()[0]) from None
        except MetricsPortUnavailable as exc:
            raise CommandError(str(exc)) from None
        finally:
            restore_signals()
