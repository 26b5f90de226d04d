"""The worker's periodic tasks beside sending, each with its interval (runtime.loop.SideTask).

Maintenance registers with the loop as a task, as Oban's plugins do, instead of
living in the claim's code: the expiry of late deliveries, the drop of expired
signing secrets, and a destination's recovery a batch at a time. (Lease
renewal is the worker's own: it needs what the worker holds.)
"""

from __future__ import annotations

import time

from django.conf import settings
from django.utils import timezone

from delivery.actions.recovery import recoveries_advance
from delivery.destinations.services import destination_secrets_drop_expired
from delivery.worker.expiry import deliveries_expire_late
from runtime.loop import SideTask

# How often deliveries still waiting EVENT_MAX_LATENESS after being queued are
# failed (more often when the lateness itself is short).
EXPIRE_EVERY = 60.0
# How often a worker looks for a destination's recovery to advance; while one runs, a batch every turn.
RECOVERIES_EVERY = 1.0


def _expire_late(*, idle: float) -> None:
    deliveries_expire_late(now=timezone.now())


def _drop_expired_secrets(*, idle: float) -> None:
    # The lanes already stopped signing with them at expiry; this only removes the rows.
    destination_secrets_drop_expired(now=timezone.now())


def maintenance_tasks() -> list[SideTask]:
    """The expiry of late deliveries and the drop of expired secrets, first due an interval after the start."""
    tasks = [
        SideTask(
            "expiry of late deliveries",
            min(EXPIRE_EVERY, settings.EVENT_MAX_LATENESS.total_seconds() / 4),
            _expire_late,
        ),
        SideTask("drop of expired signing secrets", EXPIRE_EVERY, _drop_expired_secrets),
    ]
    for task in tasks:
        task.last = time.monotonic()
    return tasks


class DestinationRecoveries:
    """One batch of a destination's recovery per turn: the sending goes on between batches.

    Due at once (a recovery left unfinished by a killed worker is taken up by
    the next, by a --once run too), then every RECOVERIES_EVERY, and on every
    turn while a recovery has more left.
    """

    def __init__(self) -> None:
        self.task = SideTask("recovery of destinations", RECOVERIES_EVERY, self._advance)
        # Since the worker last asked: a batch queued something or left more (the turn had work),
        # and a batch queued deliveries, due now (claim them this turn rather than after a rest).
        self.had_work = False
        self.queued = False

    def _advance(self, *, idle: float) -> bool:
        batch = recoveries_advance()
        if batch is None:
            return False
        self.had_work = self.had_work or batch.more or batch.requeued > 0
        self.queued = self.queued or batch.requeued > 0
        return batch.more

    def took(self) -> tuple[bool, bool]:
        """Whether the turn's batch had work and queued deliveries; both start again from no."""
        taken = (self.had_work, self.queued)
        self.had_work = self.queued = False
        return taken
