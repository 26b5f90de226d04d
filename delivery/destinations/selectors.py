"""Reads of destinations and their endpoints: the claim's, the worker's lanes', the console's."""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q, QuerySet

from delivery.credentials import signing_secrets as secret_store
from delivery.credentials.receiver_urls import url_decrypt
from delivery.destinations.audience import Audience
from delivery.models import (
    Delivery,
    DeliveryStatus,
    Destination,
    DestinationFormat,
    DestinationSecret,
    Digest,
    Endpoint,
    EndpointState,
)
from delivery.receivers.lane_settings import Relay
from delivery.rules import failure_causes as failures
from delivery.rules.conditions import DestinationCondition, destination_condition
from delivery.selectors import FAILURE_WINDOW
from kinds import kind_for
from scheduling.models import Event

# --- email relays ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def _password(ciphertext: str) -> str:
    # Decrypted once per ciphertext, as the receiver URLs are (DecryptedUrls): the lanes read every
    # destination once a second. Held in memory only, to send.
    return url_decrypt(ciphertext) if ciphertext else ""


def destination_relay(*, destination: Destination) -> Relay | None:
    """An email destination's relay settings besides its URL, its password decrypted; None for another kind."""
    if destination.format != DestinationFormat.EMAIL:
        return None
    return Relay(
        destination_id=destination.pk,
        destination_name=destination.name,
        from_address=destination.email_from,
        from_name=destination.email_from_name,
        reply_to=destination.email_reply_to,
        to=tuple(destination.email_to),
        username=destination.smtp_username,
        password=_password(destination.smtp_password_ciphertext),
        resend_unknown=destination.email_resend_unknown,
    )


# --- endpoints ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Backlog:
    """Deliveries waiting on one endpoint: QUEUED, and SENDING under a worker's lease."""

    queued: int = 0
    sending: int = 0


def endpoint_backlog(*, keys: Collection[str]) -> dict[str, Backlog]:
    """What waits on each of these endpoints, by key (every key present, zero if nothing).

    One GROUP BY over the unfinished deliveries only: each status arm can be
    read from its partial index (claim or lease), so delivered and dead history
    is never counted, however long it grows.
    """
    backlog = dict.fromkeys(keys, Backlog())
    if not backlog:
        return backlog
    rows = (
        Delivery.objects.filter(
            Q(status=DeliveryStatus.QUEUED) | Q(status=DeliveryStatus.SENDING), endpoint_key__in=list(backlog)
        )
        .values("endpoint_key")
        .annotate(
            queued=Count("id", filter=Q(status=DeliveryStatus.QUEUED)),
            sending=Count("id", filter=Q(status=DeliveryStatus.SENDING)),
        )
        .order_by()
        .values_list("endpoint_key", "queued", "sending")
    )
    for key, queued, sending in rows:
        backlog[key] = Backlog(queued=queued, sending=sending)
    return backlog


def endpoint_list(*, unhealthy_only: bool = False) -> list[Endpoint]:
    """Every endpoint (one row per receiver, so a handful), by what it shows of its URL; or only the failing and
    paused ones."""
    endpoints = Endpoint.objects.order_by("url_display", "key")
    if unhealthy_only:
        endpoints = endpoints.exclude(state=EndpointState.HEALTHY)
    return list(endpoints)


def destinations_for_claim() -> list[Destination]:
    """The enabled destinations, read once per claim batch, locked FOR KEY SHARE until the batch commits.

    The lock lets other claims read them too but makes an edit's or a
    deletion's FOR UPDATE wait for the batch: the deliveries it queues are
    then seen by the edit (moved to a new URL) or the deletion (refused).
    """
    table = Destination._meta.db_table
    return list(Destination.objects.raw(f"SELECT * FROM {table} WHERE enabled ORDER BY id FOR KEY SHARE"))


def destination_recipients(*, destination: Destination) -> QuerySet[Any]:
    """The recipients `destination` greets now, by its audience (whatever their event types).

    The one query of a destination's people (delivery.destinations.audience: the rule the claim
    applies, as a filter the labels' GIN index serves), for whatever must list or count
    them rather than decide occurrence by occurrence.
    """
    # The recipient model as the event's foreign key names it: what reads delivery (monitoring)
    # is not to reach the recipients' app through this module.
    recipient_model = Event._meta.get_field("user").related_model
    assert isinstance(recipient_model, type)  # a ForeignKey's model, resolved once the apps are loaded
    recipients: QuerySet[Any] = recipient_model._default_manager.filter(
        Audience.of(destination).recipient_filter()
    )
    return recipients


def destination_audience_labels() -> list[str]:
    """Every label the destinations' audiences name, sorted: the console's choices of recipients' labels."""
    named: set[str] = set()
    for greeted, excluded in Destination.objects.values_list("audience_labels", "excluded_labels"):
        named.update(greeted, excluded)
    return sorted(named)


def destination_signing_secrets(
    *, destinations: Iterable[Destination], now: datetime
) -> dict[int, list[str]]:
    """Each destination's secrets in force at `now`, decrypted, newest first (the worker's signers)."""
    by_destination: dict[int, list[str]] = {d.pk: [] for d in destinations}
    rows = DestinationSecret.objects.filter(destination__in=list(by_destination)).order_by(
        "-created_at", "-id"
    )
    for stored in rows:
        if stored.expires_at is None or stored.expires_at > now:
            by_destination[stored.destination_id].append(secret_store.secret_decrypt(stored.ciphertext))
    return by_destination


def destination_list() -> QuerySet[Destination]:
    """The destinations by name, each with its secrets' hints (one more query per page)."""
    return Destination.objects.order_by("name").prefetch_related("secrets")


def destination_endpoints(*, destinations: Iterable[Destination]) -> dict[str, Endpoint]:
    """The endpoint row of each destination's URL that has one (its health and pause), by key (url_key)."""
    return {e.key: e for e in Endpoint.objects.filter(key__in=[d.url_key for d in destinations])}


def endpoint_destination_names(*, endpoints: Iterable[Endpoint]) -> dict[str, str]:
    """The name of the destination of each endpoint that has one, by key: how endpoints are named to people."""
    return dict(
        Destination.objects.filter(url_key__in=[e.key for e in endpoints]).values_list("url_key", "name")
    )


def destination_unsent_count(*, destination_id: int) -> int:
    """How many deliveries the destination still has to send (QUEUED or SENDING)."""
    return Delivery.objects.filter(
        destination_id=destination_id, status__in=[DeliveryStatus.QUEUED, DeliveryStatus.SENDING]
    ).count()


@dataclass(frozen=True)
class DestinationHealth:
    """What an operator needs to judge a destination: its condition and the figures behind it."""

    destination: Destination
    endpoint_state: str  # HEALTHY, FAILING or PAUSED (its URL's endpoint)
    condition: DestinationCondition
    dead_last_hour: int
    dead_last_day: int
    # The latest dead delivery of FAILURE_WINDOW: when, its cause and HTTP status (None: no answer).
    last_failure_at: datetime | None
    last_failure_cause: str
    last_failure_status: int | None
    # Its endpoint's last success: when a delivery to this URL was last accepted.
    last_delivered_at: datetime | None
    # The endpoint's last error while FAILING (timeouts, 5xx ...), in words (its class, not the receiver's text).
    endpoint_last_error: str

    @property
    def last_failure_label(self) -> str:
        return failures.cause_label(self.last_failure_cause) if self.last_failure_cause else ""

    @property
    def last_failure_hint(self) -> str:
        """What the last failure's cause means and what fixes it ("" : none)."""
        if not self.last_failure_cause:
            return ""
        return failures.cause_hint(self.last_failure_cause, chat=not kind_for(self.destination.format).signed)


def destinations_health(
    *, now: datetime, destinations: Iterable[Destination] | None = None
) -> list[DestinationHealth]:
    """Every destination's health (or these destinations'), in three queries however long the history.

    The destinations, their endpoints, and for each destination three short
    reads of its own dead deliveries (delivery_dead_destination_idx): what died
    in the last hour and day, and the latest of FAILURE_WINDOW. When it last
    delivered is its endpoint's last success, which the workers keep.
    """
    destinations = list(destination_list() if destinations is None else destinations)
    endpoints = destination_endpoints(destinations=destinations)
    dead = _dead_figures(destinations=destinations, now=now)
    return [
        _destination_health(
            destination=destination,
            endpoint=endpoints.get(destination.url_key),
            dead=dead.get(destination.pk, _NONE_DEAD),
        )
        for destination in destinations
    ]


@dataclass(frozen=True)
class _DeadFigures:
    """A destination's dead deliveries: of the last hour and day, and the latest of FAILURE_WINDOW."""

    last_hour: int
    last_day: int
    latest_at: datetime | None
    latest_cause: str | None
    latest_status: int | None


_NONE_DEAD = _DeadFigures(0, 0, None, "", None)


def _dead_figures(*, destinations: list[Destination], now: datetime) -> dict[int, _DeadFigures]:
    """Each destination's dead figures, by id, in one statement."""
    if not destinations:
        return {}
    table = Delivery._meta.db_table
    with connection.cursor() as cursor:
        # Per destination, three reads of delivery_dead_destination_idx: its dead of the last
        # hour and day (index entries only), and its latest dead row of the window.
        cursor.execute(
            f"""
            SELECT d.id,
                   (SELECT count(*) FROM {table} x
                    WHERE x.status = %(dead)s AND x.destination_id = d.id AND x.updated_at >= %(hour)s),
                   (SELECT count(*) FROM {table} x
                    WHERE x.status = %(dead)s AND x.destination_id = d.id AND x.updated_at >= %(day)s),
                   latest.updated_at, latest.cause, latest.last_status_code
            FROM unnest(%(ids)s::int[]) AS d(id)
            LEFT JOIN LATERAL (
                SELECT x.updated_at, {failures.cause_sql(alias="x")} AS cause, x.last_status_code
                FROM {table} x
                WHERE x.status = %(dead)s AND x.destination_id = d.id AND x.updated_at >= %(since)s
                ORDER BY x.updated_at DESC
                LIMIT 1
            ) latest ON true
            """,
            {
                "dead": DeliveryStatus.DEAD,
                "since": now - FAILURE_WINDOW,
                "day": now - timedelta(days=1),
                "hour": now - timedelta(hours=1),
                "ids": [d.pk for d in destinations],
            },
        )
        return {row[0]: _DeadFigures(*row[1:]) for row in cursor.fetchall()}


def _destination_health(
    *, destination: Destination, endpoint: Endpoint | None, dead: _DeadFigures
) -> DestinationHealth:
    """The destination's health from its endpoint's row (None: a new URL's, healthy) and its dead figures."""
    state = endpoint.state if endpoint is not None else EndpointState.HEALTHY
    last_success = endpoint.last_success_at if endpoint is not None else None
    return DestinationHealth(
        destination=destination,
        endpoint_state=state,
        condition=destination_condition(
            enabled=destination.enabled,
            endpoint_state=state,
            dead_last_day=dead.last_day,
            last_failure_at=dead.latest_at,
            last_delivered_at=last_success,
        ),
        dead_last_hour=dead.last_hour,
        dead_last_day=dead.last_day,
        last_failure_at=dead.latest_at,
        last_failure_cause=dead.latest_cause or "",
        last_failure_status=dead.latest_status,
        last_delivered_at=last_success,
        endpoint_last_error=(
            failures.description_label(endpoint.last_error)
            if endpoint is not None and state == EndpointState.FAILING and endpoint.last_error
            else ""
        ),
    )


def destination_last_digest_date(*, destination_id: int | None) -> date | None:
    """The latest local date whose digest the destination has (built, whether sent yet or not); None if none.

    One probe of the (destination, local_date) unique index from its end.
    """
    if destination_id is None:
        return None
    return (
        Digest.objects.filter(destination_id=destination_id)
        .order_by("-local_date")
        .values_list("local_date", flat=True)
        .first()
    )
