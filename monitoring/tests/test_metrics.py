"""/metrics: who may read it, and what the database-wide gauges say about a small known data set."""

from datetime import timedelta
from ipaddress import ip_network

import pytest
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.selectors import endpoint_backlog
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryStatus, Endpoint, EndpointState
from delivery.selectors import delivery_finished_counts
from delivery.states.endpoints import endpoint_pause
from delivery.tests.pipeline import endpoint_columns, key_of, make_due
from delivery.worker.loop import Worker
from devtools.sink import Reply
from runtime.heartbeats import heartbeat_start
from runtime.models import ProcessHeartbeat, ProcessKind
from scheduling.models import EventZoneData
from scheduling.selectors import event_processing_count, events_held_back_counts
from scheduling.zonedata import zone_data_version
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

OUTSIDER = "203.0.113.9"


def samples(response) -> dict[tuple[str, tuple], float]:
    """{(name, ((label, value), ...)): value} for every sample in a text-format response."""
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


# --- who may read it ----------------------------------------------------------------------


@pytest.fixture
def metrics_settings(settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_NETWORKS = [ip_network("127.0.0.1/32"), ip_network("::1/128")]
    settings.TRUSTED_PROXY_COUNT = 0
    return settings


def test_an_address_outside_the_allowed_networks_is_refused_403_without_a_token_configured(
    client, metrics_settings
):
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER)

    assert response.status_code == 403
    assert b"birthday_" not in response.content


def test_with_a_token_configured_a_request_without_it_is_asked_for_it(client, metrics_settings):
    metrics_settings.METRICS_TOKEN = "s3cret-scrape-token"

    missing = client.get("/metrics", REMOTE_ADDR=OUTSIDER)
    wrong = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_AUTHORIZATION="Bearer not-the-token")
    other_scheme = client.get(
        "/metrics", REMOTE_ADDR=OUTSIDER, HTTP_AUTHORIZATION="Token s3cret-scrape-token"
    )

    for response in (missing, wrong, other_scheme):
        assert response.status_code == 401
        assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'


def test_the_token_is_accepted_from_any_address(client, metrics_settings):
    metrics_settings.METRICS_TOKEN = "s3cret-scrape-token"

    response = client.get("/metrics", REMOTE_ADDR=OUTSIDER, HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")

    assert response.status_code == 200
    assert ("birthday_database_up", ()) in samples(response)


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_an_allowed_address_needs_no_token(client, metrics_settings, address):
    metrics_settings.METRICS_TOKEN = "s3cret-scrape-token"

    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 200


def test_a_request_forwarded_by_a_proxy_nobody_declared_is_not_trusted_by_its_address(
    client, metrics_settings
):
    # nginx on the same host: every client arrives from 127.0.0.1.
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=OUTSIDER)

    assert response.status_code == 403


def test_behind_a_declared_proxy_the_client_address_decides(client, metrics_settings):
    metrics_settings.TRUSTED_PROXY_COUNT = 1
    metrics_settings.METRICS_ALLOWED_NETWORKS = [ip_network("10.0.0.0/8")]

    inside = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="10.1.2.3")
    outside = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=f"10.1.2.3, {OUTSIDER}")

    assert inside.status_code == 200
    assert outside.status_code == 403


@pytest.mark.parametrize("address", ["", "not-an-address"])
def test_a_request_without_a_usable_address_is_refused_not_an_error(client, metrics_settings, address):
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 403


def test_no_allowed_networks_means_the_token_only(client, metrics_settings):
    metrics_settings.METRICS_ALLOWED_NETWORKS = []

    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


# --- what it says -------------------------------------------------------------------------


def test_the_gauges_count_a_small_data_set_exactly(client, metrics_settings, delivery_settings, sink):
    # A transient failure waits an hour for its retry: it cannot be retried within this test.
    delivery_settings.DELIVERY_RETRY_MAX = timedelta(hours=1)
    delivered, dead, retrying, waiting = (user.events.get() for user in UserFactory.create_batch(4))
    sink.script(dead.idempotency_key, Reply(status=400))
    sink.script(retrying.idempotency_key, Reply(status=503, headers={"Retry-After": "3600"}))
    make_due([delivered, dead, retrying])
    Scheduler(once=True).run()  # 3 claimed, 3 next-year events created
    Worker(once=True).run()  # delivered 200, dead 400, retrying 503
    now = timezone.now()
    Delivery.objects.filter(status=DeliveryStatus.QUEUED).update(next_attempt_at=now - timedelta(seconds=30))
    make_due([waiting], ago=timedelta(seconds=600))
    heartbeat_start(
        kind=ProcessKind.WORKER, name="host-a:11:aaaaaa", host="host-a", pid=11, zone_data="2025b"
    )
    heartbeat_start(
        kind=ProcessKind.SCHEDULER, name="host-b:12:bbbbbb", host="host-b", pid=12, zone_data="2025b"
    )
    ProcessHeartbeat.objects.filter(name="host-b:12:bbbbbb").update(last_seen_at=now - timedelta(minutes=5))

    values = samples(client.get("/metrics"))

    def value(name, **labels):
        return values[(name, tuple(sorted(labels.items())))]

    assert value("birthday_database_up") == 1
    # Counted exactly: what is due and what is in flight. PENDING in all and handled history are only estimated.
    assert value("birthday_events", status="PROCESSING") == 1
    assert ("birthday_events", (("status", "PENDING"),)) not in values
    assert ("birthday_events", (("status", "COMPLETED"),)) not in values
    assert value("birthday_events_due") == 1
    assert 600 <= value("birthday_events_oldest_due_age_seconds") < 660
    assert {status: value("birthday_deliveries", status=status) for status in ("QUEUED", "SENDING")} == {
        "QUEUED": 1,
        "SENDING": 0,
    }
    assert ("birthday_deliveries", (("status", "DELIVERED"),)) not in values
    assert {
        status: value("birthday_deliveries_finished_last_hour", status=status)
        for status in ("DELIVERED", "DEAD")
    } == {
        "DELIVERED": 1,
        "DEAD": 1,
    }
    assert value("birthday_deliveries_due") == 1
    assert 30 <= value("birthday_deliveries_oldest_due_age_seconds") < 90
    # The once-runs above stopped (their heartbeats say so); host-b's scheduler went silent.
    assert value("birthday_processes_live", kind="worker") == 1
    assert value("birthday_processes_live", kind="scheduler") == 0
    assert {
        outcome: value("birthday_delivery_attempts_last_hour", outcome=outcome)
        for outcome in ("DELIVERED", "TRANSIENT_FAILURE", "PERMANENT_FAILURE", "ABANDONED")
    } == {"DELIVERED": 1, "TRANSIENT_FAILURE": 1, "PERMANENT_FAILURE": 1, "ABANDONED": 0}


def test_the_web_exports_its_zone_data_and_the_data_the_pending_events_follow_and_move_to(
    client, metrics_settings
):
    current = zone_data_version()
    EventZoneData.objects.create(version="2023d", pass_version=current)

    values = samples(client.get("/metrics"))

    assert values[("birthday_zone_data_info", (("version", current),))] == 1
    assert values[("birthday_events_zone_data_info", (("moving_to", current), ("version", "2023d")))] == 1


def test_before_a_scheduler_looked_the_events_zone_data_is_unknown(client, metrics_settings):
    values = samples(client.get("/metrics"))

    assert values[("birthday_events_zone_data_info", (("moving_to", ""), ("version", "unknown")))] == 1


def test_a_scraper_that_asks_for_openmetrics_gets_it(client, metrics_settings):
    response = client.get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")

    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response.content.endswith(b"# EOF\n")


def test_an_empty_database_reports_zeros_and_nothing_due(client, metrics_settings):
    values = samples(client.get("/metrics"))

    assert values[("birthday_events", (("status", "PROCESSING"),))] == 0
    # Estimated, so as of the last ANALYZE, which earlier tests' rolled-back rows may have seen.
    assert ("birthday_events_estimated", (("status", "PENDING"),)) in values
    assert values[("birthday_events_due", ())] == 0
    assert values[("birthday_events_oldest_due_age_seconds", ())] == 0
    assert values[("birthday_deliveries_oldest_due_age_seconds", ())] == 0
    assert values[("birthday_processes_live", (("kind", "scheduler"),))] == 0


def test_a_database_outage_is_a_gauge_not_a_failed_scrape(client, metrics_settings, monkeypatch):
    def refuse():
        raise OperationalError("connection refused")

    monkeypatch.setattr(connection, "ensure_connection", refuse)

    response = client.get("/metrics")

    assert response.status_code == 200
    assert samples(response) == {("birthday_database_up", ()): 0}


@pytest.mark.parametrize(
    ("count", "statement", "indexes"),
    [
        (event_processing_count, "= 'PROCESSING'", ("event_history_idx",)),
        (
            lambda: events_held_back_counts(since=timezone.now() - timedelta(hours=1)),
            "GROUP BY",
            ("event_history_idx",),
        ),
        (
            lambda: delivery_finished_counts(since=timezone.now() - timedelta(hours=1)),
            "GROUP BY",
            ("delivery_status_updated_idx",),
        ),
    ],
)
def test_the_exact_counts_read_a_range_of_an_index_not_the_table(production_plan, count, statement, indexes):
    _, plan = production_plan(count, statement)

    assert "Seq Scan" not in plan
    assert any(index in plan for index in indexes), plan


def test_the_history_is_estimated_from_the_statistics_and_labelled_so(client, metrics_settings):
    for user in UserFactory.create_batch(4):
        Delivery.objects.create(
            event=user.events.get(),
            idempotency_key=user.events.get().idempotency_key,
            endpoint_key="x",
            payload={},
            status=DeliveryStatus.DELIVERED,
            max_attempts=8,
            next_attempt_at=timezone.now(),
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_event, delivery_delivery")

    response = client.get("/metrics")
    values = samples(response)

    assert values[("birthday_deliveries_estimated", (("status", "DELIVERED"),))] == 4
    assert values[("birthday_deliveries_estimated", (("status", "DEAD"),))] == 0
    assert values[("birthday_events_estimated", (("status", "PENDING"),))] == 4
    assert "# HELP birthday_events_estimated Events in each status, estimated." in response.content.decode()
    assert "PostgreSQL's estimate" in response.content.decode()


def test_the_pending_events_are_estimated_as_of_the_last_analyze_and_only_the_due_ones_counted(
    client, metrics_settings
):
    UserFactory.create_batch(4)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_event")
    # Two more since: an estimate does not see them until the next ANALYZE or VACUUM.
    make_due([user.events.get() for user in UserFactory.create_batch(2)])

    response = client.get("/metrics")
    values = samples(response)

    assert values[("birthday_events_estimated", (("status", "PENDING"),))] == 4
    assert values[("birthday_events_due", ())] == 2
    # No exact PENDING total under the name that meant one before.
    assert ("birthday_events", (("status", "PENDING"),)) not in values
    help_line = next(
        line for line in response.content.decode().splitlines() if "HELP birthday_events_estimated" in line
    )
    assert "PENDING is the entry count of their partial index" in help_line


# --- endpoints ------------------------------------------------------------------------------

RECEIVER = "https://hooks.example.com/birthdays"
PAUSED = "https://paused.example.net/hook"
FINE = "https://fine.example.org/hook"


def queue_deliveries_to(url: str, count: int, *, status: str = DeliveryStatus.QUEUED) -> None:
    """`count` claimed events whose deliveries go to `url`, in `status`."""
    events = [user.events.get() for user in UserFactory.create_batch(count)]
    make_due(events)
    Scheduler(once=True).run()
    keys = [event.idempotency_key for event in events]
    fields = {"endpoint_key": key_of(url), "status": status}
    if status == DeliveryStatus.SENDING:
        fields.update(locked_by="worker-7:311:beef", locked_until=timezone.now() + timedelta(seconds=30))
    Delivery.objects.filter(idempotency_key__in=keys).update(**fields)


def test_each_endpoint_has_its_state_failures_backlog_and_how_long_it_has_been_down(
    client, metrics_settings, default_destination
):
    now = timezone.now()
    failing = Endpoint.objects.create(
        **endpoint_columns(RECEIVER),
        state=EndpointState.FAILING,
        consecutive_failures=9,
        failing_since=now - timedelta(minutes=10),
        next_probe_at=now + timedelta(seconds=30),
        probe_interval=timedelta(seconds=60),
    )
    paused = Endpoint.objects.create(**endpoint_columns(PAUSED))
    endpoint_pause(endpoint=paused, operator="ops-alice")
    Endpoint.objects.filter(key=key_of(PAUSED)).update(paused_at=now - timedelta(hours=2))
    # Labelled by its destination's name, never by the URL (a credential); one without a destination by its id.
    destination_create(settings=DestinationSettings(name="fine", url=FINE), operator="ops")
    labels = {RECEIVER: f"endpoint {failing.pk}", PAUSED: f"endpoint {paused.pk}", FINE: "fine"}
    queue_deliveries_to(RECEIVER, 3)
    queue_deliveries_to(RECEIVER, 1, status=DeliveryStatus.SENDING)  # in flight: not waiting
    queue_deliveries_to(PAUSED, 2)

    values = samples(client.get("/metrics"))

    def value(name, *, endpoint, **labelled):
        return values[(name, tuple(sorted({"endpoint": labels[endpoint], **labelled}.items())))]

    assert {
        (url, state): value("birthday_endpoint_state", endpoint=url, state=state)
        for url in (RECEIVER, PAUSED, FINE)
        for state in EndpointState.values
        if value("birthday_endpoint_state", endpoint=url, state=state)
    } == {(RECEIVER, "FAILING"): 1, (PAUSED, "PAUSED"): 1, (FINE, "HEALTHY"): 1}
    assert sum(v for (name, _), v in values.items() if name == "birthday_endpoint_state") == 3
    assert value("birthday_endpoint_consecutive_failures", endpoint=RECEIVER) == 9
    assert value("birthday_endpoint_consecutive_failures", endpoint=FINE) == 0
    waiting = {
        url: value("birthday_endpoint_waiting_deliveries", endpoint=url) for url in (RECEIVER, PAUSED, FINE)
    }
    assert waiting == {RECEIVER: 3, PAUSED: 2, FINE: 0}
    assert 600 <= value("birthday_endpoint_failing_seconds", endpoint=RECEIVER) < 660
    assert value("birthday_endpoint_failing_seconds", endpoint=PAUSED) == 0
    assert 7200 <= value("birthday_endpoint_paused_seconds", endpoint=PAUSED) < 7260
    assert value("birthday_endpoint_paused_seconds", endpoint=RECEIVER) == 0
    assert value("birthday_endpoint_paused_seconds", endpoint=FINE) == 0


def test_no_endpoint_yet_means_no_endpoint_series(client, metrics_settings):
    values = samples(client.get("/metrics"))

    assert not [name for name, _ in values if name.startswith("birthday_endpoint_")]


def test_the_endpoint_gauges_cost_three_queries_however_many_endpoints(client, metrics_settings):
    Endpoint.objects.create(**endpoint_columns(RECEIVER))
    with CaptureQueriesContext(connection) as one:
        client.get("/metrics")
    for number in range(20):
        Endpoint.objects.create(**endpoint_columns(f"https://r{number}.example.com/hook"))
    queue_deliveries_to(RECEIVER, 2)

    with CaptureQueriesContext(connection) as many:
        client.get("/metrics")

    assert len(many.captured_queries) == len(one.captured_queries)
    endpoint_queries = [
        q["sql"]
        for q in many.captured_queries
        # (the destinations' list, which the destination gauges read, has url_key among its columns)
        if "delivery_endpoint" in q["sql"] or "endpoint_key" in q["sql"] or '"url_key" IN' in q["sql"]
    ]
    assert len(endpoint_queries) == 3  # the endpoints, what waits on them, their destinations' names


def test_what_waits_on_endpoints_is_read_from_the_unfinished_deliveries_indexes(production_plan):
    _, plan = production_plan(lambda: endpoint_backlog(keys=[key_of(RECEIVER), key_of(PAUSED)]), "GROUP BY")

    assert "Seq Scan" not in plan
    assert any(
        index in plan
        for index in ("delivery_queued_due_idx", "delivery_lease_idx", "delivery_status_updated_idx")
    ), plan


def test_a_destination_whose_deliveries_end_dead_is_failing_in_the_metrics(client, metrics_settings):
    from console.tests.console_data import dead_at, delivered_at
    from delivery.destinations.services import destination_create

    # given crm-broken, 3 of 3 deliveries DEAD (its endpoint healthy), and crm-fine, delivering
    broken = destination_create(
        settings=DestinationSettings(name="crm-broken", url="https://broken.example.org/h"), operator="o"
    ).destination
    fine = destination_create(
        settings=DestinationSettings(name="crm-fine", url="https://fine.example.org/h"), operator="o"
    ).destination
    for _ in range(3):
        dead_at(broken, status_code=400)
    delivered = delivered_at(fine)

    values = samples(client.get("/metrics"))

    def value(name, **labels):
        return values[(name, tuple(sorted(labels.items())))]

    assert value("birthday_destination_condition", destination="crm-broken", condition="failing") == 1
    assert value("birthday_destination_condition", destination="crm-broken", condition="ok") == 0
    assert value("birthday_destination_needs_attention", destination="crm-broken") == 1
    assert value("birthday_destination_dead_last_hour", destination="crm-broken") == 3
    assert value("birthday_destination_dead_last_day", destination="crm-broken") == 3
    assert value("birthday_destination_last_delivered_timestamp_seconds", destination="crm-broken") == 0
    assert value("birthday_destination_needs_attention", destination="crm-fine") == 0
    assert value(
        "birthday_destination_last_delivered_timestamp_seconds", destination="crm-fine"
    ) == pytest.approx(delivered.updated_at.timestamp())


def test_every_metric_the_alerts_name_is_one_the_web_exports(client, metrics_settings):
    import re
    from pathlib import Path

    import yaml

    from delivery.destinations.services import destination_create

    # given an endpoint and a destination, so their series exist
    # Its endpoint row is made with it.
    destination_create(settings=DestinationSettings(name="crm", url=RECEIVER), operator="o")
    exported = {name for name, _ in samples(client.get("/metrics"))}

    rules = yaml.safe_load((Path(__file__).parents[2] / "deploy/prometheus/alerts.yml").read_text())
    named = {
        name
        for group in rules["groups"]
        for rule in group["rules"]
        for name in re.findall(r"\bbirthday_[a-z_]+", rule["expr"])
    }

    assert named - exported == set()
