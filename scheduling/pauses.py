"""Greetings held back: a recipient's, or every recipient's of one event type.

A pause is a span of time, stored as when it began and, once it is over, when
it ended (with who did each). The scheduler's claim holds back an occurrence
whose send time falls in the span, or any while it lasts: the event is FAILED
with the reason below, never sent, and the next occurrence is scheduled, as
for every claimed event. So resuming needs no work of its own: an occurrence
whose time came while paused is failed when the scheduler reaches it, even
after the resume (a scheduler that was stopped meanwhile), and the next one
is one whose send time has not passed. An occurrence due before the pause
began and still unclaimed when it began is held back too while the pause lasts.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from django.db import models
from django.db.models import F, Q

# The failure reasons of the events held back: the metrics count them by these exact texts.
RECIPIENT_PAUSED = "recipient paused"
EVENT_TYPE_PAUSED = "event type paused"
# As long as Django's usernames: who paused or resumed (an operator, or an API account).
ACTOR_MAX_LENGTH = 150


class PauseSpan(NamedTuple):
    """When a pause began and, once over, when it ended; (None, None): never paused."""

    paused_at: datetime | None
    resumed_at: datetime | None

    @property
    def active(self) -> bool:
        return self.paused_at is not None and self.resumed_at is None

    def holds(self, target: datetime) -> bool:
        """Whether an occurrence due at `target` is held back: any while paused, after that those due in the span."""
        if self.paused_at is None:
            return False
        return self.resumed_at is None or self.paused_at <= target < self.resumed_at


class Pausable:
    """A model with a pause's columns (paused_at, paused_by, resumed_at, resumed_by): its pause, and whether it is on."""

    paused_at: datetime | None
    resumed_at: datetime | None

    @property
    def pause(self) -> PauseSpan:
        return PauseSpan(self.paused_at, self.resumed_at)

    @property
    def paused(self) -> bool:
        """Whether its greetings are held back now."""
        return self.pause.active


def pause_constraints(*, prefix: str) -> list[models.CheckConstraint]:
    """What the database holds a model's paused_at/paused_by/resumed_at/resumed_by columns to.

    Each moment has its actor, and a resume follows a pause.
    """
    return [
        models.CheckConstraint(
            condition=Q(paused_at__isnull=True, paused_by="")
            | (Q(paused_at__isnull=False) & ~Q(paused_by="")),
            name=f"{prefix}_paused_by_whom",
        ),
        models.CheckConstraint(
            condition=Q(resumed_at__isnull=True, resumed_by="")
            # paused_at named too: a comparison with NULL would pass a CHECK.
            | (Q(paused_at__isnull=False, resumed_at__gte=F("paused_at")) & ~Q(resumed_by="")),
            name=f"{prefix}_resumed_after_a_pause",
        ),
    ]
