"""A destination's condition as an operator must read it: one word, whether it needs attention, and why.

The endpoint's state (delivery.rules.health) says whether its receiver is up: it
counts what is retried (timeouts, 5xx ...). A receiver that answers 400 to
every message is "up" by that measure while every delivery to it ends DEAD, so
the condition also weighs what died lately. A pure function of the figures,
tested as a table; delivery.destinations.selectors.destinations_health gathers them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from delivery.models import EndpointState

# Levels, most urgent first: the console orders and colours by them.
FAILING = "failing"  # needs attention: nothing gets through
DEGRADED = "degraded"  # needs attention: some deliveries die
PAUSED = "paused"  # held back by an operator
OK = "ok"
IDLE = "idle"  # nothing sent yet, nothing failed
DISABLED = "disabled"
ORDER = (FAILING, DEGRADED, PAUSED, OK, IDLE, DISABLED)


@dataclass(frozen=True)
class DestinationCondition:
    level: str
    label: str  # what the console and the API show
    reason: str  # one sentence saying why

    @property
    def needs_attention(self) -> bool:
        return self.level in (FAILING, DEGRADED, PAUSED)

    @property
    def rank(self) -> int:
        return ORDER.index(self.level)


# What the endpoint's state decides by itself, whatever died lately.
_BY_ENDPOINT_STATE: dict[str, DestinationCondition] = {
    EndpointState.FAILING: DestinationCondition(
        FAILING,
        "Failing",
        "Its receiver keeps failing (timeouts, connection errors, 5xx): deliveries wait while one probe at a "
        "time tries it.",
    ),
    # A chat service said the webhook or channel no longer exists (kinds/, Verdict.GONE):
    # nothing can get through until a person fixes it, so it is as urgent as failing.
    EndpointState.GONE: DestinationCondition(
        FAILING,
        "Gone",
        "Its service says this destination no longer exists (a deleted webhook, an archived channel): "
        "its deliveries wait without spending attempts until it is fixed there and resumed here, or given a "
        "new URL.",
    ),
    EndpointState.PAUSED: DestinationCondition(
        PAUSED, "Paused", "An operator paused it: its deliveries wait until resumed."
    ),
}


def destination_condition(
    *,
    enabled: bool,
    endpoint_state: str,
    dead_last_day: int,
    last_failure_at: datetime | None,
    last_delivered_at: datetime | None,
) -> DestinationCondition:
    """The condition of a destination from its endpoint's state and its dead deliveries of the last day."""
    if endpoint_state in _BY_ENDPOINT_STATE:
        return _BY_ENDPOINT_STATE[endpoint_state]
    if dead_last_day:
        return _dead_condition(
            dead_last_day=dead_last_day,
            delivered_since=last_delivered_at is not None
            and (last_failure_at is None or last_delivered_at >= last_failure_at),
        )
    if not enabled:
        return DestinationCondition(
            DISABLED, "Disabled", "Disabled: occurrences claimed now get no delivery for it."
        )
    if last_delivered_at is None:
        return DestinationCondition(
            IDLE, "No deliveries yet", "Nothing has been delivered to it, and nothing failed."
        )
    return DestinationCondition(OK, "Healthy", "Delivering; nothing ended DEAD in the last day.")


def _dead_condition(*, dead_last_day: int, delivered_since: bool) -> DestinationCondition:
    """Deliveries died in the last day: degraded if one was delivered since the last of them, else failing."""
    died = f"{dead_last_day} deliver{'y' if dead_last_day == 1 else 'ies'} ended DEAD in the last day"
    if delivered_since:
        return DestinationCondition(
            DEGRADED, "Some deliveries dead", f"{died}, though others were delivered since."
        )
    return DestinationCondition(
        FAILING,
        "Failing: deliveries end dead",
        f"{died} and none was delivered since the last one: its receiver refuses these messages (an answer "
        "that retrying will not change).",
    )
