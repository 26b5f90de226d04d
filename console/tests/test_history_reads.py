"""Every operator read costs the same however much history and however many recipients there are:
what each page really runs, EXPLAINed.

Each read below is requested as an operator would (the console's pages, /metrics,
the API's lists), its SQL captured, and every statement that names a table that
grows (the history: events, deliveries, attempts; and the recipients) EXPLAINed
with sequential scans forbidden, so that the tiny test tables plan as the large
ones do. A statement passes when each read of such a table in its plan is
bounded: by an index condition that narrows it to a key, a time range or the
unfinished rows, or streamed from an index under a LIMIT with nothing in between
that would read all of it first (a sort, a hash, an aggregate). The PENDING
events are one per recipient and type, so reading all of them (counting them,
say) is not bounded either. A search by name must look the name up in an index:
a plan that reads recipients to test their names fails even under a LIMIT, since
a rare name would read all of them before the LIMIT is reached. A list's count
of its rows must have a LIMIT.
"""

from __future__ import annotations

import json
import re

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from console.tests.console_data import completed_event, delivery_for, endpoint, failed_event
from delivery.models import AttemptOutcome, DeliveryStatus
from scheduling.models import Event, EventStatus, EventType, MessageTemplate
from users.models import User
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db

HISTORY_TABLES = ("scheduling_event", "delivery_delivery", "delivery_deliveryattempt")
RECIPIENTS = "users_user"
GROWING_TABLES = (*HISTORY_TABLES, RECIPIENTS)
# Partial indexes holding only what waits for a worker or is in flight, never
# handled history. Not the PENDING events' (event_pending_due_idx,
# event_one_pending_per_user_type): they hold an entry per recipient and type.
BACKLOG_INDEXES = ("delivery_queued_due_idx", "delivery_lease_idx")
# What an operator searches recipients by: read as a Filter, each recipient is read to test it.
SEARCHED_COLUMNS = re.compile(r"\b(first_name|last_name|external_id)\b")
BACKLOG_STATUSES = re.compile(r"\b(PENDING|PROCESSING|QUEUED|SENDING)\b")
HISTORY_STATUSES = re.compile(r"\b(COMPLETED|FAILED|DELIVERED|DEAD)\b")
# A condition on one of these narrows a read to a time range or to some rows by key.
NARROWING_COLUMNS = (
    "target_timestamp_utc",
    "updated_at",
    "finished_at",
    "next_attempt_at",
    "locked_until",
    "id =",
    "id = ANY",
    "user_id",
    "event_id",
    "delivery_id",
    "idempotency_key",
)
# Nodes that pass rows on as they come: a LIMIT above them stops the read below.
STREAMING = {"Limit", "Nested Loop", "Incremental Sort", "Result", "Subquery Scan", "Unique", "Merge Join"}

A = f"/{settings.ADMIN_URL}"


def narrowed(condition: str) -> bool:
    """Whether an index condition bounds the read to a range, some keys, or the unfinished rows only."""
    # A name looked up in its trigram index, or an external id in its unique one, narrows as a key does.
    if any(column in condition for column in NARROWING_COLUMNS) or SEARCHED_COLUMNS.search(condition):
        return True
    return bool(BACKLOG_STATUSES.search(condition)) and not HISTORY_STATUSES.search(condition)


def scan_is_bounded(node: dict) -> bool:
    if node.get("Index Name") in BACKLOG_INDEXES:
        return True
    if narrowed(node.get("Index Cond", "")):
        return True
    # A bitmap heap scan is as narrow as the index scans feeding it.
    children = node.get("Plans", [])
    return (
        node["Node Type"] == "Bitmap Heap Scan"
        and bool(children)
        and all(child_is_bounded(child) for child in children)
    )


def child_is_bounded(node: dict) -> bool:
    if node["Node Type"] in ("BitmapOr", "BitmapAnd"):
        return all(child_is_bounded(child) for child in node["Plans"])
    return scan_is_bounded(node)


def unbounded_reads(node: dict, *, under_limit: bool = False) -> list[str]:
    """The reads of growing tables in this plan that neither an index condition nor a LIMIT bounds,
    and the searches of recipients that test each one's name rather than look it up."""
    found = []
    if node.get("Relation Name") in GROWING_TABLES:
        if node["Node Type"] == "Seq Scan":
            found.append(f"Seq Scan on {node['Relation Name']}")
        elif not scan_is_bounded(node) and not under_limit:
            found.append(
                f"{node['Node Type']} on {node['Relation Name']} ({node.get('Index Name')}), unbounded"
            )
    if node.get("Relation Name") == RECIPIENTS and SEARCHED_COLUMNS.search(node.get("Filter", "")):
        found.append(f"{node['Node Type']} on {RECIPIENTS} reading recipients to test {node['Filter']}")
    # Keeping some recipients' rows from an index read in another order walks the
    # history until it meets them, under a LIMIT or not: a rare name, all of it.
    if node.get("Relation Name") in GROWING_TABLES and "user_id" in node.get("Filter", ""):
        found.append(
            f"{node['Node Type']} on {node['Relation Name']} testing each row's recipient: {node['Filter']}"
        )
    streaming = node["Node Type"] == "Limit" or (under_limit and node["Node Type"] in STREAMING)
    for child in node.get("Plans", []):
        # A nested loop's inner side runs once per outer row, with the outer row's key as its condition.
        inner = node["Node Type"] == "Nested Loop" and child.get("Parent Relationship") == "Inner"
        found += unbounded_reads(child, under_limit=streaming and not inner)
    return found


def plan_of(sql: str, *, forbidden: tuple[str, ...]) -> dict:
    with transaction.atomic(), connection.cursor() as cursor:
        for setting in forbidden:
            cursor.execute(f"SET LOCAL {setting} = off")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        plan = cursor.fetchone()[0]
        transaction.set_rollback(True)
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


# The tiny test tables make reading all of a table (and sorting or hashing
# it) look cheapest, where on the large ones the planner walks an index and
# stops at the LIMIT. Forbidden here, what is left is what no index serves.
# Sorts and merge joins are forbidden only in later tries: a sort of the few
# rows an index condition found is fine, and so is merging two index scans
# in the same order; forbidding them can send the planner elsewhere. The last
# try forbids bitmap scans: on a tiny table, ANDing a status's whole partial index
# with a few recipients' entries looks as cheap as reading those entries and
# testing their status, which is what a large table gets.
FORBIDDEN = ("enable_seqscan", "enable_hashjoin", "enable_material")
TRIES = (
    FORBIDDEN,
    (*FORBIDDEN, "enable_sort"),
    (*FORBIDDEN, "enable_sort", "enable_mergejoin"),
    (*FORBIDDEN, "enable_bitmapscan"),
)


def unbounded(sql: str) -> list[str]:
    """The unbounded reads in the statement's plan, or [] if some plan the indexes allow has none."""
    found = []
    for forbidden in TRIES:
        found = unbounded_reads(plan_of(sql, forbidden=forbidden))
        if not found:
            return []
    return found


def growing_statements(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return [
        q["sql"]
        for q in captured.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT") and any(t in q["sql"] for t in GROWING_TABLES)
    ]


HISTORY_DAYS = 200
HISTORY_SQL = """
WITH e AS (
    INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
        target_timestamp_local, target_timezone, executed_at, failure_reason, version, idempotency_key,
        created_at, updated_at)
    SELECT gen_random_uuid(), u.id, 'BIRTHDAY', CASE WHEN mod(g, 20) = 0 THEN 'FAILED' ELSE 'COMPLETED' END,
           d, d + time '09:00', to_char(d, 'YYYY-MM-DD') || 'T09:00:00+00:00', 'UTC', d + time '09:00:01', '', 2,
           'h-' || substr(md5(u.id::text || g), 1, 30), now(), now()
    FROM users_user u, generate_series(1, %s) g, LATERAL (SELECT current_date - 1200 - g AS d) dd
    RETURNING id, idempotency_key, status, target_timestamp_utc),
d AS (
    INSERT INTO delivery_delivery (id, event_id, idempotency_key, endpoint_key, payload, status, attempts,
        max_attempts, next_attempt_at, locked_by, last_status_code, last_error, delivered_at, created_at, updated_at)
    SELECT gen_random_uuid(), e.id, e.idempotency_key, 'x', '{}',
           CASE e.status WHEN 'FAILED' THEN 'DEAD' ELSE 'DELIVERED' END, 1, 8, e.target_timestamp_utc, '',
           200, '', e.target_timestamp_utc, e.target_timestamp_utc, e.target_timestamp_utc
    FROM e
    RETURNING id, status, updated_at)
INSERT INTO delivery_deliveryattempt (delivery_id, number, worker, started_at, finished_at, duration_ms, outcome,
    status_code, error, response_excerpt)
SELECT d.id, 1, 'w', d.updated_at, d.updated_at, 12,
       CASE d.status WHEN 'DEAD' THEN 'PERMANENT_FAILURE' ELSE 'DELIVERED' END, 200, '', ''
FROM d
"""


MORE_RECIPIENTS = 20_000
MORE_RECIPIENTS_SQL = """
WITH u AS (
    INSERT INTO users_user (id, first_name, last_name, date_of_birth, timezone, version, created_at, updated_at)
    SELECT gen_random_uuid(), 'First' || g, 'Last' || g, date '1980-01-01' + g, 'UTC', 1, now(), now()
    FROM generate_series(1, %s) g
    RETURNING id, date_of_birth)
INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
    target_timestamp_local, target_timezone, failure_reason, version, idempotency_key, created_at, updated_at)
SELECT gen_random_uuid(), u.id, 'BIRTHDAY', 'PENDING', current_date + 30, current_date + 30 + time '09:00',
       to_char(current_date + 30, 'YYYY-MM-DD') || 'T09:00:00+00:00', 'UTC', '', 1,
       'm-' || substr(md5(u.id::text), 1, 30), now(), now()
FROM u
"""


@pytest.fixture(scope="module")
def history(django_db_setup, django_db_blocker):
    """A little of everything the pages show: handled years with deliveries and attempts, a backlog.

    Built once for the module, in a transaction rolled back after its last test: each
    test runs in a savepoint inside it and reads the same rows and statistics. Every
    test here asks for it, so none sees rows it did not expect.
    """
    with django_db_blocker.unblock(), transaction.atomic():
        yield _history()
        transaction.set_rollback(True)


def _history() -> dict:
    users = UserFactory.create_batch(3)
    for user in users:
        completed_event(user, years_ago=2)
        completed_event(user, years_ago=1)
    failed = failed_event(UserFactory())
    event = completed_event(UserFactory(first_name="Grace", last_name="Hopper"), years_ago=3)
    queued = Event.objects.filter(status=EventStatus.PENDING).first()
    Event.objects.filter(pk=queued.pk).update(status=EventStatus.PROCESSING)
    delivery_for(
        queued, status=DeliveryStatus.QUEUED, attempts=[(AttemptOutcome.TRANSIENT_FAILURE, 503, "HTTP 503")]
    )
    with connection.cursor() as cursor:
        # Years of handled history behind each recipient, so that reading all of
        # a table costs the planner more than reading what an index narrows to.
        cursor.execute(HISTORY_SQL, [HISTORY_DAYS])
        # Recipients enough that reading them all costs the planner more than
        # looking a rare name up (with a PENDING event each, as every recipient has).
        cursor.execute(MORE_RECIPIENTS_SQL, [MORE_RECIPIENTS])
        # Their names wait in each trigram index's pending list, which the planner
        # prices as read whole on every lookup; at full size (auto)vacuum has merged it.
        cursor.execute(
            """
            SELECT gin_clean_pending_list(c.oid)
            FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
            WHERE i.indrelid = 'users_user'::regclass AND a.amname = 'gin'
            """
        )
        cursor.execute("ANALYZE scheduling_event, delivery_delivery, delivery_deliveryattempt, users_user")
    endpoint(settings.WEBHOOK_URL or "http://127.0.0.1:9/hook")
    return {
        "event": event,
        "delivery": event.deliveries.get(),
        "failed": failed,
        "user": event.user,
        "template": MessageTemplate.objects.get(event_type=EventType.BIRTHDAY),
    }


def reads(h) -> dict[str, str]:
    event, delivery, user = h["event"], h["delivery"], h["user"]
    events, deliveries = f"{A}scheduling/event/", f"{A}delivery/delivery/"
    return {
        "events": events,
        "events, second page": f"{events}?p=1",
        "events COMPLETED": f"{events}?status__exact=COMPLETED",
        "events FAILED": f"{events}?status__exact=FAILED",
        "events PENDING": f"{events}?status__exact=PENDING",
        "events PENDING by send time": f"{events}?status__exact=PENDING&o=4",
        "events overdue": f"{events}?overdue=yes",
        "events of a type": f"{events}?event_type__exact=BIRTHDAY",
        "events of the past day": f"{events}?target=past_24h",
        "events of the next week, PENDING": f"{events}?target=next_7d&status__exact=PENDING",
        "events by key": f"{events}?q={event.idempotency_key}",
        "events by name": f"{events}?q=Hopper",
        "events by name, COMPLETED": f"{events}?q=Hopper&status__exact=COMPLETED",
        "events by recipient id": f"{events}?q={user.pk}",
        "event": f"{events}{event.pk}/change/",
        "deliveries": deliveries,
        "deliveries DELIVERED": f"{deliveries}?status__exact=DELIVERED",
        "deliveries DEAD": f"{deliveries}?status__exact=DEAD",
        "deliveries QUEUED": f"{deliveries}?status__exact=QUEUED",
        "deliveries with an expired lease": f"{deliveries}?lease=expired",
        "deliveries with a transient failure": f"{deliveries}?attempt_outcome=TRANSIENT_FAILURE",
        "deliveries with an abandoned attempt": f"{deliveries}?attempt_outcome=ABANDONED",
        "deliveries by key": f"{deliveries}?q={event.idempotency_key}",
        "delivery with its attempts": f"{deliveries}{delivery.pk}/change/",
        "recipients": f"{A}users/user/",
        "recipients by name": f"{A}users/user/?q=Hopper",
        "recipient with events": f"{A}users/user/{user.pk}/change/",
        "message template with its preview": f"{A}scheduling/messagetemplate/{h['template'].pk}/change/",
        "endpoints": f"{A}delivery/endpoint/",
        "dashboard": f"{A}dashboard/",
    }


READS = list(
    reads({"event": Event(pk=1), "delivery": Event(pk=2), "user": Event(pk=3), "template": Event(pk=4)})
)


@pytest.mark.parametrize("read", READS)
def test_a_console_read_never_scans_or_counts_the_history_or_the_recipients(console, history, read):
    statements = growing_statements(console, reads(history)[read])

    assert statements, "the read touches no history table: nothing checked"
    for sql in statements:
        assert not unbounded(sql), (sql, unbounded(sql))
        if sql.upper().startswith("SELECT COUNT(*)") and read != "dashboard":
            # A list's count of its rows (the paginator's) stops at a bound.
            assert "LIMIT" in sql.upper(), sql


def test_a_metrics_scrape_never_scans_the_history(client, history):
    statements = growing_statements(client, "/metrics")

    assert len(statements) >= 5
    for sql in statements:
        assert not unbounded(sql), (sql, unbounded(sql))


@pytest.mark.parametrize(
    "path", ["/api/v1/users/", "/api/v1/users/?page=2&page_size=2", "/api/v1/users/{user}/events/"]
)
def test_an_api_list_never_scans_or_counts_the_history_or_the_recipients(operator, history, path):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=operator).key}")
    statements = growing_statements(api, path.format(user=history["user"].pk))

    assert statements
    for sql in statements:
        assert not unbounded(sql), (sql, unbounded(sql))


def sql_of(queryset) -> str:
    with CaptureQueriesContext(connection) as captured:
        list(queryset)
    return captured.captured_queries[-1]["sql"]


def test_the_checker_catches_a_sort_of_the_whole_history(history):
    # The events list's old default: the latest send time first, across statuses.
    sql = sql_of(Event.objects.order_by("-target_timestamp_utc")[:50])

    assert unbounded(sql)


def test_the_checker_catches_a_count_of_a_status_in_the_history(history):
    sql = sql_of(Event.objects.filter(status=EventStatus.COMPLETED).values("status").annotate(n=Count("*")))

    assert unbounded(sql)


def test_the_checker_catches_a_count_of_every_pending_event(history):
    # The old exact PENDING total of /metrics and the dashboard: an index entry per recipient.
    sql = sql_of(Event.objects.filter(status=EventStatus.PENDING).values("status").annotate(n=Count("*")))

    assert unbounded(sql)


def test_the_checker_catches_a_count_of_every_recipient(history):
    # DRF's pagination count, as the API's list ran it.
    with CaptureQueriesContext(connection) as captured:
        User.objects.count()

    assert unbounded(captured.captured_queries[-1]["sql"])


def test_the_checker_catches_a_search_that_reads_recipients_to_test_their_names(history):
    # Django's own admin search as it was: no index serves iexact on the external id,
    # so the names' arms cannot be looked up either, even under a LIMIT.
    sql = sql_of(
        User.objects.filter(Q(last_name__icontains="Hopper") | Q(external_id__iexact="Hopper")).order_by(
            "created_at"
        )[:50]
    )

    assert any("to test" in read for read in unbounded(sql)), unbounded(sql)
