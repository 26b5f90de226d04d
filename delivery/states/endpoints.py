"""The Endpoint state machine and the fleet's shared limits: health, pause, probes, rate slots, in-flight shares.

Every write of Endpoint.state goes through `endpoint_transition`: one
conditional UPDATE on the expected state. The other columns the workers
share (the failure count, the Retry-After block, the rate schedule in calendar seconds, the probe
schedule) are written under the endpoint row's lock, so two workers' batches
apply one after the other and the fleet agrees on one state.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import F, Sum
from django.utils import timezone

from delivery.metrics import ENDPOINTS_GONE
from delivery.models import Destination, Endpoint, EndpointPermit, EndpointState
from delivery.rules.health import Answer, Health, HealthPolicy, observe
from delivery.rules.pace import RateSlot, RateWindow, rate_slots_take
from runtime.sql import column_field, send
from runtime.wakeup import WORKER_CHANNEL, notify
from scheduling.exceptions import InvalidStateTransition
from scheduling.state_machine import StateMachine

logger = logging.getLogger(__name__)

HEALTHY, FAILING, PAUSED, GONE = (
    EndpointState.HEALTHY,
    EndpointState.FAILING,
    EndpointState.PAUSED,
    EndpointState.GONE,
)


class EndpointActor(enum.StrEnum):
    """Who moves an endpoint. Each move belongs to one actor."""

    WORKER = "worker"  # recording a batch of answers
    PROBE = "probe"  # the one attempt a FAILING endpoint lets through
    OPERATOR = "operator"  # the console's and the API's Pause and Resume, a destination's new URL


# The state machine: each move and the one actor who makes it.
ENDPOINT_TRANSITIONS = StateMachine(
    {
        # ENDPOINT_FAILURE_THRESHOLD endpoint failures in a row, over all workers.
        (HEALTHY, FAILING): EndpointActor.WORKER,
        # The probe (or any attempt still in flight) succeeded: the backlog drains.
        (FAILING, HEALTHY): EndpointActor.PROBE,
        # An operator holds every delivery to it; in-flight requests finish.
        (HEALTHY, PAUSED): EndpointActor.OPERATOR,
        (FAILING, PAUSED): EndpointActor.OPERATOR,
        # Resumed: HEALTHY, so the backlog drains at once; if the receiver is still
        # down, the first answers make it FAILING again.
        (PAUSED, HEALTHY): EndpointActor.OPERATOR,
        # Its service answered that the destination no longer exists (channels: a deleted
        # webhook, an archived channel), to any attempt, a probe's included.
        (HEALTHY, GONE): EndpointActor.WORKER,
        (FAILING, GONE): EndpointActor.WORKER,
        # The operator fixed it at the service (a new webhook behind the same URL, the channel
        # unarchived) and resumes it, or gave the destination a new URL; or pauses it meanwhile.
        # If it is still gone, the first answer makes it GONE again.
        (GONE, HEALTHY): EndpointActor.OPERATOR,
        (GONE, PAUSED): EndpointActor.OPERATOR,
    }
)

_HEALTH_FIELDS = tuple(Health.__dataclass_fields__)
# The health of an endpoint whose row is gone (endpoint_record_answers): a new one's.
_GONE = Endpoint()


def endpoint_log_fields(endpoint: Endpoint) -> dict[str, Any]:
    """How log lines name an endpoint: its id, its destination's name and the URL's redacted form, never
    the URL (a credential)."""
    destination = Destination.objects.filter(url_key=endpoint.key).values_list("name", flat=True).first()
    return {"endpoint_id": endpoint.pk, "destination": destination, "endpoint": endpoint.url_display}


def endpoint_transition(
    *,
    endpoint_id: int,
    source: str,
    target: str,
    actor: EndpointActor,
    changes: Mapping[str, Any] | None = None,
) -> bool:
    """Move the endpoint from `source` to `target` if it is still in `source`; say whether it moved."""
    ENDPOINT_TRANSITIONS.refuse_unless(source=source, target=target, actor=actor, mover="An endpoint")
    moved = Endpoint.objects.filter(pk=endpoint_id, state=source).update(
        state=target, updated_at=timezone.now(), **(changes or {})
    )
    return moved == 1


def endpoint_for_destination(*, destination: Destination) -> Endpoint:
    """The endpoint row of the destination's URL, created HEALTHY if there is none yet.

    Destinations make theirs when created or given a new URL
    (delivery.destinations.services); this is for what predates that, and
    for a destination saved meanwhile.
    """
    found = Endpoint.objects.filter(key=destination.url_key).first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return Endpoint.objects.create(
                key=destination.url_key,
                url_ciphertext=destination.url_ciphertext,
                url_display=destination.url_display,
            )
    except IntegrityError:  # another process created it first
        return Endpoint.objects.get(key=destination.url_key)


def endpoint_display_follow(*, destination: Destination) -> None:
    """The endpoint of the destination's URL shows it as the destination now does (its kind's shown form:
    a new format shows the same URL otherwise, and an endpoint found again kept an older form)."""
    Endpoint.objects.filter(key=destination.url_key).exclude(url_display=destination.url_display).update(
        url_display=destination.url_display
    )


@dataclass(frozen=True)
class Verdict:
    """What a batch's answers made of the endpoint, for the decisions about its deliveries."""

    health: Health
    down: bool


def endpoint_record_answers(
    *, key: str, answers: Sequence[Answer], now: datetime, policy: HealthPolicy
) -> Verdict:
    """Apply one worker's batch of answers to the endpoint's shared health; the caller's transaction holds it.

    The row is locked for the rest of the caller's transaction, so batches from
    several workers count failures one after the other. An endpoint gone
    meanwhile (its destination's URL changed while these were in flight) has
    no health left to keep: the answers are weighed as a healthy one's, and
    nothing is written.
    """
    endpoint = Endpoint.objects.select_for_update().filter(key=key).first()
    before = Health(
        **{name: getattr(endpoint if endpoint is not None else _GONE, name) for name in _HEALTH_FIELDS}
    )
    after = observe(health=before, answers=answers, now=now, policy=policy)
    if endpoint is None:
        return Verdict(health=after, down=after.is_down(policy))
    changes = {
        name: getattr(after, name) for name in _HEALTH_FIELDS if getattr(after, name) != getattr(before, name)
    }
    moves = changes.pop("state", None)
    if moves is not None:
        actor = EndpointActor.WORKER if moves in (FAILING, GONE) else EndpointActor.PROBE
        endpoint_transition(
            endpoint_id=endpoint.pk, source=before.state, target=moves, actor=actor, changes=changes
        )
        _log_move(endpoint=endpoint, before=before, after=after)
        if moves == HEALTHY:
            notify(WORKER_CHANNEL)  # idle workers drain the backlog now, not at their next poll
    elif changes:
        Endpoint.objects.filter(pk=endpoint.pk).update(updated_at=now, **changes)
    return Verdict(health=after, down=after.is_down(policy))


def endpoint_note_success(*, key: str, at: datetime) -> Callable[[], bool]:
    """A batch that all succeeded, at an endpoint its worker last saw healthy: move its last success forward
    (never back). The function returned says whether the row was as the worker saw it (HEALTHY, no failure
    counted); if not, the caller weighs the batch by the endpoint's health (endpoint_record_answers).

    Sent in the caller's pipeline (runtime.sql.send) with the batch's last statements, so
    the row lock it takes lasts from there to the commit: one round trip. A worker's view
    is up to a refresh old: another worker may have counted failures meanwhile, or made the
    endpoint FAILING; these successes then reset the count, or end the failing, as any
    success does (delivery.rules.health). Without that, a FAILING endpoint whose last deliveries
    went through such a worker stayed FAILING with nothing left to probe it with.
    """
    quote = connection.ops.quote_name
    field = column_field(Endpoint, "last_success_at")
    column = quote(field.column)
    key_column = quote(column_field(Endpoint, "key").column)
    state = quote(column_field(Endpoint, "state").column)
    failures = quote(column_field(Endpoint, "consecutive_failures").column)
    wait = send(
        f"UPDATE {quote(Endpoint._meta.db_table)} SET {column} = GREATEST({column}, %s) WHERE {key_column} = %s "
        f"RETURNING {state} = %s AND {failures} = 0",
        [field.field.get_db_prep_value(at, connection), key, HEALTHY],
    )

    def as_seen() -> bool:
        rows = wait()[0]
        return not rows or bool(rows[0][0])  # no row: the endpoint went (its URL changed), nothing to weigh

    return as_seen


def _log_move(*, endpoint: Endpoint, before: Health, after: Health) -> None:
    if after.state == GONE:
        ENDPOINTS_GONE.inc()
        logger.error(
            "Endpoint gone: its service says the destination no longer exists; nothing is sent to it until an "
            "operator resumes it or changes its URL",
            extra={**endpoint_log_fields(endpoint), "last_error": after.last_error, "was": before.state},
        )
    elif after.state == FAILING:
        logger.warning(
            "Endpoint failing: %s failures in a row; deliveries wait for it, probing every %s s at most",
            after.consecutive_failures,
            int(after.probe_interval.total_seconds()) if after.probe_interval else 0,
            extra={**endpoint_log_fields(endpoint), "last_error": after.last_error},
        )
    else:
        logger.info(
            "Endpoint healthy again after failing since %s",
            before.failing_since.isoformat() if before.failing_since else "?",
            extra=endpoint_log_fields(endpoint),
        )


def endpoint_pause(*, endpoint: Endpoint, operator: str) -> Endpoint:
    """Hold every delivery to this endpoint: its backlog stays QUEUED until resumed."""
    # A paused endpoint is not probed: its failing, if any, ends here.
    held = {
        "paused_by": operator,
        "paused_at": timezone.now(),
        "failing_since": None,
        "next_probe_at": None,
        "probe_interval": None,
    }
    if was := _operator_move(
        endpoint=endpoint, sources=(HEALTHY, FAILING, GONE), target=PAUSED, changes=held
    ):
        logger.warning("Endpoint paused by %s", operator, extra={**endpoint_log_fields(endpoint), "was": was})
        notify(WORKER_CHANNEL)
        return Endpoint.objects.get(pk=endpoint.pk)
    current = Endpoint.objects.get(pk=endpoint.pk)
    raise InvalidStateTransition(
        f"Endpoint {current.url_display} is already paused (by {current.paused_by})."
    )


def endpoint_resume(*, endpoint: Endpoint, operator: str) -> Endpoint:
    """Let deliveries to this paused or gone endpoint flow again; its backlog drains in due order."""
    freed = {"paused_by": "", "paused_at": None, "consecutive_failures": 0, "blocked_until": None}
    if was := _operator_move(endpoint=endpoint, sources=(PAUSED, GONE), target=HEALTHY, changes=freed):
        logger.warning(
            "Endpoint resumed by %s", operator, extra={**endpoint_log_fields(endpoint), "was": was}
        )
        notify(WORKER_CHANNEL)
        return Endpoint.objects.get(pk=endpoint.pk)
    current = Endpoint.objects.get(pk=endpoint.pk)
    raise InvalidStateTransition(
        f"Endpoint {current.url_display} is {current.state}, neither paused nor gone: nothing to resume."
    )


def _operator_move(
    *, endpoint: Endpoint, sources: tuple[str, ...], target: str, changes: Mapping[str, Any]
) -> str | None:
    """Move the endpoint, as an operator asks, from the first of `sources` it is in to `target`; return the state
    it left, or None if it was in none of `sources`."""
    for source in sources:
        if endpoint_transition(
            endpoint_id=endpoint.pk,
            source=source,
            target=target,
            actor=EndpointActor.OPERATOR,
            changes=changes,
        ):
            return source
    return None


def endpoint_forget_gone(*, key: str, operator: str) -> bool:
    """A destination left this URL (its endpoint's `key`) for another: a GONE verdict on it is answered, and raises no alert any more.

    The old URL's row stays while something unsent still names it (then
    destination_endpoint_move deletes it); HEALTHY, as nothing more is sent to it
    unless a destination takes the URL again, and then it is tried afresh.
    """
    endpoint = Endpoint.objects.filter(key=key, state=GONE).first()
    if endpoint is None:
        return False
    moved = endpoint_transition(
        endpoint_id=endpoint.pk,
        source=GONE,
        target=HEALTHY,
        actor=EndpointActor.OPERATOR,
        changes={"consecutive_failures": 0, "blocked_until": None},
    )
    if moved:
        logger.warning(
            "Gone endpoint left for a new URL by %s", operator, extra=endpoint_log_fields(endpoint)
        )
    return moved


def endpoint_take_probe(*, endpoint_id: int, now: datetime, lease: timedelta) -> bool:
    """Win the FAILING endpoint's next probe (one worker at a time); its schedule moves past the lease."""
    return (
        Endpoint.objects.filter(pk=endpoint_id, state=FAILING, next_probe_at__lte=now).update(
            next_probe_at=now + lease, updated_at=now
        )
        == 1
    )


def endpoint_return_probe(*, endpoint_id: int, now: datetime) -> None:
    """The probe won found nothing to send: the next one may start after the current interval."""
    Endpoint.objects.filter(pk=endpoint_id, state=FAILING).update(
        next_probe_at=now + F("probe_interval"), updated_at=now
    )


def endpoint_take_rate_slots(*, endpoint_id: int, want: int, rate: float, now: float) -> list[RateSlot]:
    """Take up to `want` request slots of the fleet's `rate` a second, all in one calendar second (delivery.rules.pace).

    Under the endpoint's row lock, so the workers take the slots one after
    the other and no second hands out more than it holds, however many workers
    there are. `now` is the caller's time.time(), the clock its slots are in.
    """
    with transaction.atomic():
        row = Endpoint.objects.select_for_update().only("rate_second", "rate_taken").get(pk=endpoint_id)
        window, slots = rate_slots_take(
            window=RateWindow(second=row.rate_second or 0, taken=row.rate_taken),
            now=now,
            want=want,
            rate=rate,
        )
        Endpoint.objects.filter(pk=endpoint_id).update(rate_second=window.second, rate_taken=window.taken)
    return slots


def endpoint_share_in_flight(
    *, endpoint_id: int, worker: str, want: int, holding: int, cap: int, lease: timedelta, now: datetime
) -> int:
    """Set this worker's share of the fleet's in-flight cap for the endpoint; return the share granted.

    Under the endpoint's row lock: the shares of live workers (unexpired rows)
    never add up to more than `cap`, and no worker asks for more than an equal
    part while others want some, so a newcomer gets its part as the others
    renew theirs. A worker's row says the most it may have open until it
    renews: the share granted, or the `holding` requests it still has open
    when its share shrinks (they end by themselves, not when the share does).
    Counting those is what keeps a newcomer from opening its part while they
    are still open.
    """
    with transaction.atomic():
        Endpoint.objects.select_for_update().only("id").get(pk=endpoint_id)
        EndpointPermit.objects.filter(
            endpoint_id=endpoint_id, expires_at__lte=now
        ).delete()  # dead workers' shares
        live = EndpointPermit.objects.filter(endpoint_id=endpoint_id).exclude(worker=worker)
        others = live.aggregate(total=Sum("permits"))["total"] or 0
        fair = -(-cap // (live.count() + 1))
        granted = max(0, min(want, fair, cap - others))
        EndpointPermit.objects.update_or_create(
            endpoint_id=endpoint_id,
            worker=worker,
            defaults={"permits": max(granted, holding), "expires_at": now + lease},
        )
    return granted


def endpoint_release_shares(*, worker: str) -> None:
    """A stopping worker gives its in-flight shares back at once."""
    EndpointPermit.objects.filter(worker=worker).delete()
