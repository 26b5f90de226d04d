"""runtime.sql's pipeline: statements sent without waiting, results and errors where the caller expects them."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runtime.models import ProcessHeartbeat, ProcessKind
from runtime.sql import execute, insert_rows, pipeline, send

pytestmark = pytest.mark.django_db(transaction=True)

COLUMNS = ("kind", "name", "host", "pid")


def same_for_all() -> dict:
    now = timezone.now()
    return {"started_at": now, "last_seen_at": now, "processed": 0, "succeeded": 0, "failed": 0}


def names() -> list[str]:
    return sorted(ProcessHeartbeat.objects.values_list("name", flat=True))


def test_statements_sent_in_a_pipeline_run_in_order_and_their_results_come_when_asked():
    with transaction.atomic(), pipeline():
        insert_rows(
            ProcessHeartbeat,
            COLUMNS,
            [(ProcessKind.WORKER, "a", "h", 1), (ProcessKind.WORKER, "b", "h", 2)],
            same_for_all=same_for_all(),
        )
        renamed = send(
            "UPDATE runtime_processheartbeat SET pid = pid + 10 WHERE name = %s RETURNING name, pid", ["a"]
        )
        insert_rows(
            ProcessHeartbeat, COLUMNS, [(ProcessKind.SCHEDULER, "c", "h", 3)], same_for_all=same_for_all()
        )
        # The UPDATE ran after the first insert and before the second, whenever its result is read.
        assert renamed() == ([("a", 11)], 1)
        counted = execute("SELECT count(*) FROM runtime_processheartbeat", [])
        assert counted == [(3,)]
    assert names() == ["a", "b", "c"]


def test_an_error_in_a_pipelined_statement_surfaces_as_djangos_error_and_nothing_is_kept():
    insert_rows(
        ProcessHeartbeat, COLUMNS, [(ProcessKind.WORKER, "taken", "h", 1)], same_for_all=same_for_all()
    )
    with pytest.raises(IntegrityError):
        with transaction.atomic(), pipeline():
            insert_rows(
                ProcessHeartbeat, COLUMNS, [(ProcessKind.WORKER, "new", "h", 2)], same_for_all=same_for_all()
            )
            # A duplicate name: refused by the unique key, known only when the results come back.
            insert_rows(
                ProcessHeartbeat,
                COLUMNS,
                [(ProcessKind.WORKER, "taken", "h", 3)],
                same_for_all=same_for_all(),
            )
    assert names() == ["taken"]
    # The connection is usable afterwards, outside any pipeline.
    assert execute("SELECT 1", []) == [(1,)]


def test_pipelined_statements_are_logged_like_the_others():
    with CaptureQueriesContext(connection) as captured, transaction.atomic(), pipeline():
        insert_rows(
            ProcessHeartbeat, COLUMNS, [(ProcessKind.WORKER, "logged", "h", 1)], same_for_all=same_for_all()
        )
        send("SELECT pg_notify(%s, %s)", ["runtime_test", ""])
    statements = [q["sql"] for q in captured.captured_queries]
    assert any(s.startswith("INSERT INTO runtime_processheartbeat") and "'{logged}'" in s for s in statements)
    assert any("pg_notify('runtime_test', '')" in s for s in statements)


def test_rows_fetched_in_binary_have_the_values_and_types_of_rows_fetched_as_text():
    insert_rows(ProcessHeartbeat, COLUMNS, [(ProcessKind.WORKER, "bin", "h", 7)], same_for_all=same_for_all())
    sql = (
        "SELECT id, name, pid, started_at, started_at::date, '0190a4c2-7f00-7000-8000-000000000001'::uuid "
        "FROM runtime_processheartbeat"
    )
    as_text, as_binary = execute(sql, []), execute(sql, [], binary=True)
    assert as_binary == as_text
    assert [type(value) for value in as_binary[0]] == [type(value) for value in as_text[0]]
    started = as_binary[0][3]
    assert started.utcoffset().total_seconds() == 0  # aware, in UTC, as Django's own loader gives
