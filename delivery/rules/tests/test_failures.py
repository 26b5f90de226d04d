"""Failures by cause, a destination's condition, and the group actions (acknowledge, resend)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from console.tests.console_data import dead_at, delivered_at
from delivery.actions.failures import UnknownCause, failure_group_acknowledge, failure_group_resend
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.selectors import destinations_health
from delivery.destinations.services import destination_create
from delivery.models import Delivery, DeliveryStatus, EndpointState, FailureAcknowledgement
from delivery.rules import conditions
from delivery.rules import failure_causes as failures
from delivery.selectors import failure_group_deliveries, failure_groups

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)
LATE = (
    "Not delivered within EVENT_MAX_LATENESS (48 h) of being queued: the receiver was failing; last: HTTP 503"
)


def destination(name: str):
    return destination_create(
        settings=DestinationSettings(name=name, url=f"https://{name}.example.org/hook"), operator="ops"
    ).destination


# --- causes -------------------------------------------------------------------------------


CAUSES = [
    # (status code, last_error, cause)
    (400, "Bad Request", "http_400"),
    (503, "Service Unavailable", "http_503"),
    (None, "Timed out after 10 s", "timeout"),
    (None, "Connection error: Cannot connect to host crm.example.org:443", "connection"),
    (None, "Refused: 10.0.0.5 is a private address (WEBHOOK_ALLOWED_NETWORKS)", "address_refused"),
    (None, "Request failed: invalid URL", "bad_request"),
    (503, LATE, "too_late"),
    (None, LATE, "too_late"),
    (None, "something new", "other"),
    (None, "50%_off' OR 1=1", "other"),
]


@pytest.mark.parametrize(("status_code", "error", "cause"), CAUSES)
def test_cause_of_names_the_status_or_the_class_of_error(status_code, error, cause):
    assert failures.cause_of(status_code=status_code, error=error) == cause
    assert failures.is_cause(cause)


@pytest.mark.django_db
@pytest.mark.parametrize(("status_code", "error", "cause"), CAUSES)
def test_the_sql_cause_is_the_same_rule_as_cause_of(status_code, error, cause):
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {failures.CAUSE_SQL} FROM (SELECT %s::int AS last_status_code, %s::text AS last_error) d",
            [status_code, error],
        )
        assert cursor.fetchone()[0] == cause


def test_causes_read_in_words_and_the_receivers_text_is_never_part_of_them():
    assert failures.cause_label("http_400") == "HTTP 400 Bad Request"
    assert failures.cause_label("http_599") == "HTTP 599"
    assert failures.cause_label("timeout").startswith("Timed out")
    assert failures.description_label(
        "Connection error: Cannot connect to host x:443 ssl:default [Connect c"
    ) == ("Could not connect to the receiver (refused, reset, DNS or TLS)")
    assert failures.description_label("HTTP 503 (Service Unavailable)") == "HTTP 503 Service Unavailable"
    assert not failures.is_cause("http_abc")
    assert not failures.is_cause("")


# --- the condition, as a table -----------------------------------------------------------

HOUR_AGO, TWO_HOURS_AGO = NOW - timedelta(hours=1), NOW - timedelta(hours=2)


@pytest.mark.parametrize(
    ("enabled", "state", "dead", "last_failure", "last_delivered", "level"),
    [
        (True, EndpointState.HEALTHY, 7, HOUR_AGO, None, conditions.FAILING),  # every delivery dead
        (True, EndpointState.HEALTHY, 3, HOUR_AGO, TWO_HOURS_AGO, conditions.FAILING),  # none since
        (True, EndpointState.HEALTHY, 3, TWO_HOURS_AGO, HOUR_AGO, conditions.DEGRADED),  # delivered since
        (True, EndpointState.FAILING, 0, None, HOUR_AGO, conditions.FAILING),
        (True, EndpointState.PAUSED, 0, None, HOUR_AGO, conditions.PAUSED),
        (True, EndpointState.GONE, 0, None, HOUR_AGO, conditions.FAILING),  # the chat service says deleted
        (True, EndpointState.HEALTHY, 0, None, HOUR_AGO, conditions.OK),
        (True, EndpointState.HEALTHY, 0, None, None, conditions.IDLE),
        (False, EndpointState.HEALTHY, 0, None, HOUR_AGO, conditions.DISABLED),
        (False, EndpointState.HEALTHY, 2, HOUR_AGO, None, conditions.FAILING),
    ],
)
def test_a_destinations_condition(enabled, state, dead, last_failure, last_delivered, level):
    condition = conditions.destination_condition(
        enabled=enabled,
        endpoint_state=state,
        dead_last_day=dead,
        last_failure_at=last_failure,
        last_delivered_at=last_delivered,
    )
    assert condition.level == level
    assert condition.needs_attention == (
        level in (conditions.FAILING, conditions.DEGRADED, conditions.PAUSED)
    )
    assert condition.label != "Healthy" or level == conditions.OK


# --- reads ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_destination_whose_deliveries_all_end_dead_needs_attention_with_its_figures():
    # given crm-broken: 7 of 7 deliveries DEAD with HTTP 400, 2 of them in the last hour, the endpoint HEALTHY
    now = timezone.now()
    broken, fine = destination("crm-broken"), destination("crm-fine")
    for minutes in (5, 30, 90, 120, 180, 240, 300):
        dead_at(broken, status_code=400, finished_at=now - timedelta(minutes=minutes))
    delivered_at(fine, finished_at=now - timedelta(minutes=3))

    # when its health is read
    health = {h.destination.name: h for h in destinations_health(now=now)}

    # then it is failing, with its dead counts, its last failure in words and no delivery
    broken_health = health["crm-broken"]
    assert broken_health.endpoint_state == EndpointState.HEALTHY
    assert broken_health.condition.level == conditions.FAILING
    assert broken_health.condition.needs_attention
    assert (broken_health.dead_last_hour, broken_health.dead_last_day) == (2, 7)
    assert broken_health.last_failure_label == "HTTP 400 Bad Request"
    assert broken_health.last_failure_status == 400
    assert broken_health.last_delivered_at is None
    assert health["crm-fine"].condition.level == conditions.OK
    assert health["crm-fine"].last_delivered_at == now - timedelta(minutes=3)


@pytest.mark.django_db
def test_failures_are_grouped_by_destination_and_cause_with_counts_times_and_examples():
    # given two causes at one destination, one at another, and one dead delivery older than the window
    now = timezone.now()
    crm, chat = destination("crm"), destination("chat")
    crm_400 = [
        dead_at(crm, status_code=400, finished_at=now - timedelta(minutes=m)) for m in (10, 70, 200, 400)
    ]
    dead_at(crm, status_code=None, error="Timed out after 10 s", finished_at=now - timedelta(minutes=20))
    dead_at(chat, status_code=None, error="Connection error: refused", finished_at=now - timedelta(minutes=5))
    dead_at(crm, status_code=400, finished_at=now - timedelta(days=8))

    # when the groups are read
    groups = failure_groups(now=now)

    # then one row per (destination, cause), newest first, with counts, first and last seen and 3 examples
    assert [(g.destination_name, g.cause) for g in groups] == [
        ("chat", "connection"),
        ("crm", "http_400"),
        ("crm", "timeout"),
    ]
    crm_group = groups[1]
    assert (crm_group.count, crm_group.count_last_hour) == (4, 1)
    assert crm_group.first_seen == crm_400[-1].updated_at
    assert crm_group.last_seen == crm_400[0].updated_at
    assert crm_group.example_ids == [d.pk for d in crm_400[:3]]
    assert crm_group.label == "HTTP 400 Bad Request"


@pytest.mark.django_db
def test_an_acknowledged_group_leaves_the_list_until_a_new_failure_of_its_cause():
    now = timezone.now()
    crm = destination("crm")
    dead_at(crm, status_code=400, finished_at=now - timedelta(minutes=30))
    seen = failure_groups(now=now)[0]

    # when an operator acknowledges it as seen
    ack = failure_group_acknowledge(
        destination=crm, cause="http_400", through=seen.last_seen, operator="ops", now=now
    )

    # then it is gone, nothing else changed; a new 400 brings the group back with that one only
    assert (ack.acknowledged_by, ack.through) == ("ops", seen.last_seen)
    assert failure_groups(now=now) == []
    assert Delivery.objects.filter(status=DeliveryStatus.DEAD).count() == 1
    fresh = dead_at(crm, status_code=400, finished_at=now)
    [group] = failure_groups(now=now)
    assert (group.count, group.example_ids) == (1, [fresh.pk])
    # an acknowledgement never moves back
    failure_group_acknowledge(
        destination=crm, cause="http_400", through=now - timedelta(days=1), operator="b", now=now
    )
    assert FailureAcknowledgement.objects.get().through == seen.last_seen


@pytest.mark.django_db
def test_acknowledging_or_resending_an_unknown_cause_is_refused_and_changes_nothing():
    crm = destination("crm")
    with pytest.raises(UnknownCause):
        failure_group_acknowledge(destination=crm, cause="nonsense", through=NOW, operator="ops", now=NOW)
    with pytest.raises(UnknownCause):
        failure_group_resend(destination=crm, cause="http_4OO", operator="ops", now=NOW)
    assert not FailureAcknowledgement.objects.exists()


@pytest.mark.django_db
def test_resending_a_group_queues_again_only_its_dead_deliveries():
    now = timezone.now()
    crm = destination("crm")
    four_hundreds = [dead_at(crm, status_code=400, finished_at=now - timedelta(minutes=m)) for m in (1, 2)]
    timeout = dead_at(crm, status_code=None, error="Timed out after 10 s", finished_at=now)

    result = failure_group_resend(destination=crm, cause="http_400", operator="ops", now=now)

    assert (result.resent, result.refused, result.remaining) == (2, 0, 0)
    assert {d.status for d in Delivery.objects.filter(pk__in=[d.pk for d in four_hundreds])} == {
        DeliveryStatus.QUEUED
    }
    assert Delivery.objects.get(pk=timeout.pk).status == DeliveryStatus.DEAD
    assert list(failure_group_deliveries(destination_id=crm.pk, cause="http_400", now=now)) == []


# --- plans: a window's dead deliveries, never the history ------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "read",
    [
        lambda: failure_groups(now=timezone.now()),
        lambda: destinations_health(now=timezone.now()),
        lambda: list(failure_group_deliveries(destination_id=1, cause="http_400", now=timezone.now())),
    ],
    ids=["failure_groups", "destinations_health", "failure_group_deliveries"],
)
def test_failure_reads_take_a_range_of_an_index_of_dead_deliveries(production_plan, read):
    destination("crm")

    _, plan = production_plan(read, "delivery_delivery")

    # Of the deliveries, only DEAD ones of the window: a range of (status, updated_at), or of one
    # destination's dead ones (destination, updated_at); never the table.
    assert "delivery_status_updated_idx" in plan or "delivery_dead_destination_idx" in plan, plan
    assert "Seq Scan on delivery_delivery" not in plan, plan
