"""While a thread waits for PostgreSQL, its asyncio event loop runs: the requests in flight go on meanwhile.

A worker has one thread for its claims, its records and its event loop of
requests (delivery.worker.sender). psycopg's connection waits for its socket in
`Connection.wait`, blocked in a select, so while a claim or a record is on the
server, no answer is read and no request starts: a third of the worker's time
at a 0 ms receiver (bench/results/REPORT-queued.md). Inside
`loop_runs_while_waiting(loop)` the connection waits on the loop instead: the
socket is watched by the loop (add_reader / add_writer) and the loop runs until
it is ready, so the requests in flight are answered, and the ones their places
free are started, during the round trip.

The same statements, in the same order, in the same transaction: only where the
thread waits changes. A socket already ready is not waited for at all (one poll
first), so a quick round trip costs no turn of the loop.

What runs on the loop meanwhile must touch no database: the connection is in
the middle of a statement (psycopg's lock on it is not re-entrant, and would
deadlock the thread). delivery.worker.sender's callbacks keep to that (it is why they
start only what needs no rate slot from PostgreSQL).
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection
from psycopg.waiting import READY_R, READY_W, WAIT_R, WAIT_W, Ready


def _ready_now(fileno: int, wanted: int) -> int:
    """The socket's readiness for `wanted` without waiting (0: not ready)."""
    poller = select.poll()
    poller.register(
        fileno, (select.POLLIN if wanted & WAIT_R else 0) | (select.POLLOUT if wanted & WAIT_W else 0)
    )
    events = poller.poll(0)
    if not events:
        return 0
    mask = events[0][1]
    if mask & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
        # Let psycopg read the socket and find out what went wrong.
        return int(READY_R if wanted & WAIT_R else READY_W)
    return int((READY_R if mask & select.POLLIN else 0) | (READY_W if mask & select.POLLOUT else 0))


def _ready_on_loop(loop: asyncio.AbstractEventLoop, fileno: int, wanted: int) -> int:
    """Run `loop` until the socket is ready for `wanted`; its readiness."""
    ready: asyncio.Future[int] = loop.create_future()

    def mark(flag: int) -> None:
        if not ready.done():
            ready.set_result(flag)

    if wanted & WAIT_R:
        loop.add_reader(fileno, mark, int(READY_R))
    if wanted & WAIT_W:
        loop.add_writer(fileno, mark, int(READY_W))
    try:
        return loop.run_until_complete(ready)
    finally:
        loop.remove_reader(fileno)
        loop.remove_writer(fileno)


def wait_running(loop: asyncio.AbstractEventLoop, gen: Any, fileno: int) -> Any:
    """psycopg's wait for a generator on the connection's socket, with `loop` running while it is not ready."""
    try:
        wanted = next(gen)
        while True:
            ready = _ready_now(fileno, wanted) or _ready_on_loop(loop, fileno, wanted)
            wanted = gen.send(Ready(ready))
    except StopIteration as stop:
        return stop.value


@contextmanager
def loop_runs_while_waiting(loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """In this block, the thread's database connection runs `loop` while it waits for the server.

    Not while `loop` is already running (a statement from inside it would
    re-enter it) or closed, nor for a wait with a timeout (psycopg's own
    cancellation paths): those wait as psycopg does.
    """
    connection.ensure_connection()
    pg = connection.connection
    own_wait = type(pg).wait

    def wait(gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None or loop.is_running() or loop.is_closed():
            return own_wait(pg, gen, interval, timeout)
        return wait_running(loop, gen, pg.pgconn.socket)

    pg.wait = wait  # this connection's, for the block only
    try:
        yield
    finally:
        del pg.wait
