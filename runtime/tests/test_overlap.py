"""runtime.overlap: while the connection waits for PostgreSQL, the thread's event loop runs, and nothing else changes."""

import asyncio
import time

import pytest
from django.db import DatabaseError, connection, transaction

from runtime.overlap import loop_runs_while_waiting
from runtime.sql import execute, pipeline, send

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def loop():
    running = asyncio.new_event_loop()
    yield running
    if not running.is_closed():
        pending = asyncio.all_tasks(running)
        for task in pending:
            task.cancel()
        running.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        running.close()


def ticking(loop: asyncio.AbstractEventLoop) -> list[float]:
    """A task on `loop` that notes the time every 10 ms, for as long as the loop runs."""
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    loop.create_task(tick())
    return ticks


def test_a_statement_waiting_on_the_server_lets_the_loop_run_meanwhile(loop):
    ticks = ticking(loop)

    with loop_runs_while_waiting(loop):
        started = time.monotonic()
        assert execute("SELECT pg_sleep(0.3), 42", []) == [("", 42)]
        ended = time.monotonic()

    # The task ran all through the statement's 0.3 s, not only around it
    during = [t for t in ticks if started <= t <= ended]
    assert len(during) >= 10
    assert max(b - a for a, b in zip(during, during[1:], strict=False)) < 0.15


def test_outside_the_block_the_thread_waits_as_psycopg_does_and_the_loop_stands_still(loop):
    ticks = ticking(loop)

    execute("SELECT pg_sleep(0.2)", [])

    assert ticks == []
    assert "wait" not in vars(connection.connection)


def test_a_pipelined_transaction_gives_the_same_results_and_the_connections_own_wait_comes_back(loop):
    ticking(loop)
    with loop_runs_while_waiting(loop):
        with transaction.atomic(), pipeline():
            execute("CREATE TEMPORARY TABLE overlap_t (n int)", [])
            send("INSERT INTO overlap_t SELECT generate_series(1, 1000)", [])
            slept = send("SELECT pg_sleep(0.05)", [])
            summed = send("SELECT sum(n), count(*) FROM overlap_t", [])
            slept()
            assert summed()[0] == [(500500, 1000)]
        assert execute("SELECT count(*) FROM overlap_t", []) == [(1000,)]

    assert "wait" not in vars(connection.connection)


def test_an_error_on_the_server_comes_out_as_djangos_and_the_connection_is_still_usable(loop):
    ticking(loop)
    with pytest.raises(DatabaseError), loop_runs_while_waiting(loop), transaction.atomic():
        execute("SELECT 1 / 0", [])

    assert "wait" not in vars(connection.connection)
    assert execute("SELECT 1", []) == [(1,)]


def test_a_closed_loop_leaves_the_wait_to_psycopg(loop):
    loop.close()

    with loop_runs_while_waiting(loop):
        assert execute("SELECT 7", []) == [(7,)]
