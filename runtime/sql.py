"""Set-based statements for PostgreSQL.

The hot paths (the scheduler's claim, the worker's claim and record) move a
whole batch per statement: `UPDATE ... FROM <rows>` and `INSERT ... SELECT`.
PostgreSQL receives a batch as one array per column (`unnest`) in binary,
which psycopg dumps cheaply (a JSON column costs more, for its json.dumps).
Values are adapted by the model fields' database types.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, ParamSpec, TypeVar

import psycopg
from django.db import connection, models
from psycopg.types.json import Jsonb

P = ParamSpec("P")
T = TypeVar("T")


def execute(sql: str, params: Sequence[Any], *, binary: bool = False) -> list[tuple[Any, ...]]:
    """Run one set-based statement in the current transaction; return its rows (see send)."""
    return send(sql, params, binary=binary)()[0]


def execute_count(sql: str, params: Sequence[Any]) -> int:
    """Run one set-based statement that returns no rows (a DELETE); return how many rows it touched."""
    return send(sql, params)()[1]


# The psycopg pipeline of each thread's connection while `pipeline()` runs.
_pipelines = threading.local()


@contextmanager
def pipeline() -> Iterator[None]:
    """Statements `send` runs in this block reach PostgreSQL without waiting for the previous ones' results.

    The server executes one statement while Python prepares the next; a result
    is waited for only when asked for (the function `send` returns), or at the
    block's end. An error in any statement comes out there, as Django's database
    error, and the transaction can only be rolled back.
    """
    if getattr(_pipelines, "current", None) is not None:
        yield
        return
    connection.ensure_connection()
    with connection.wrap_database_errors, connection.connection.pipeline() as current:
        _pipelines.current, _pipelines.sent = current, []
        try:
            yield
            # Every statement's result, so each is checked and logged like any other.
            for wait in _pipelines.sent:
                wait()
        finally:
            _pipelines.current, _pipelines.sent = None, []


def send(
    sql: str, params: Sequence[Any], *, binary: bool = False
) -> Callable[[], tuple[list[tuple[Any, ...]], int]]:
    """Send one statement in the current transaction; the function returned waits for its rows and row count.

    Outside `pipeline()` the statement has run by the time this returns. The
    rows are an empty list for a statement that returns none. The parameters are bound
    on the server: Django's cursors bind them on the client, quoting every
    element of every array in Python, which costs more than the statement
    itself on a claim's batch. Errors come out as Django's database errors,
    and the statement is logged, with its parameters, where Django logs
    queries (DEBUG, CaptureQueriesContext), so tests can EXPLAIN exactly what
    ran.

    With `binary`, PostgreSQL returns the rows in its binary format, which
    psycopg decodes in C, where text timestamps go through Django's Python
    loader: a claim's batch arrives faster. Not for jsonb columns: they
    would arrive parsed, not as the text Django's loader gives.
    """
    connection.ensure_connection()
    current = getattr(_pipelines, "current", None)
    started = time.monotonic()
    cursor = psycopg.Cursor(connection.connection)
    with connection.wrap_database_errors:
        cursor.execute(sql, params, binary=binary)
    result: list[tuple[list[tuple[Any, ...]], int]] = []

    def wait() -> tuple[list[tuple[Any, ...]], int]:
        if not result:
            with connection.wrap_database_errors, cursor:
                if current is not None and cursor.pgresult is None:
                    current.sync()
                result.append(((cursor.fetchall() if cursor.description else []), cursor.rowcount))
            if connection.queries_logged:
                elapsed = f"{time.monotonic() - started:.3f}"
                bound = psycopg.ClientCursor(connection.connection).mogrify(sql.replace("%b", "%s"), params)
                connection.queries_log.append({"sql": bound, "time": elapsed})
        return result[0]

    if current is None:
        wait()
    else:
        _pipelines.sent.append(wait)
    return wait


class ColumnField(NamedTuple):
    """A model field that has a column, with the column's name."""

    column: str
    field: models.Field[Any, Any]


def column_field(model: type[models.Model], name: str) -> ColumnField:
    """`model`'s field `name` with its column's name.

    A name whose field has no column of its own (a reverse relation) has no place
    in a statement that writes or groups by columns: a mistake, said at once.
    """
    field = model._meta.get_field(name)
    if not isinstance(field, models.Field) or field.column is None:
        raise ValueError(f"{model.__name__}.{name} has no column of its own")
    return ColumnField(field.column, field)


def after(check: Callable[[], object]) -> None:
    """Call `check` once the statements sent so far have their results: at the pipeline's end, or now outside one.

    For the function a `start_..._transition` returns: its move is checked (a
    strict one raises) without the caller waiting for it before sending more.
    """
    if getattr(_pipelines, "current", None) is None:
        check()
    else:
        _pipelines.sent.append(check)


def waited(start: Callable[P, Callable[[], T]]) -> Callable[P, T]:
    """`start` (a `start_...` that sends its statement and returns the function that waits for it) waited for at
    once: the same arguments, its result. What a `..._transition` is to its `start_..._transition`."""

    def wait(*args: P.args, **kwargs: P.kwargs) -> T:
        return start(*args, **kwargs)()

    wait.__name__ = wait.__qualname__ = start.__name__.removeprefix("start_")
    return wait


def rows_relation(
    alias: str, columns: Sequence[tuple[str, models.Field[Any, Any]]], rows: Sequence[tuple[Any, ...]]
) -> tuple[str, list[list[Any]]]:
    """A FROM-clause relation named `alias` whose columns hold `rows`, and its parameters.

    `columns` names each column and the model field whose type it has.
    """
    names = [name for name, _ in columns]
    arrays = ", ".join(f"%b::{field.db_type(connection)}[]" for _, field in columns)
    values = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in columns]
    for i, (_, field) in enumerate(columns):
        if isinstance(field, models.JSONField):
            values[i] = [None if v is None else Jsonb(v) for v in values[i]]
    return f"unnest({arrays}) AS {alias}({', '.join(names)})", values


def insert_rows(
    model: type[models.Model],
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    same_for_all: Mapping[str, Any] | None = None,
    ignore_conflicts: bool = False,
) -> None:
    """Insert plain tuples whose values follow `columns` (attribute names) in one statement.

    `same_for_all` gives columns whose value is the same on every row: sent once,
    not once per row (dumping arrays is most of this function's client time).
    With `ignore_conflicts`, rows that would break a unique constraint are
    skipped, as `ON CONFLICT DO NOTHING`.
    """
    if not rows:
        return
    same_for_all = same_for_all or {}
    fields = [column_field(model, name) for name in columns]
    constant_fields = [column_field(model, name) for name in same_for_all]
    relation, params = rows_relation("v", [(f"v_{column}", f) for column, f in fields], rows)
    target = ", ".join(connection.ops.quote_name(column) for column, _ in [*fields, *constant_fields])
    selected = ", ".join([f"v.v_{column}" for column, _ in fields] + ["%s"] * len(constant_fields))
    constants = [
        f.get_db_prep_value(value, connection)
        for (_, f), value in zip(constant_fields, same_for_all.values(), strict=True)
    ]
    sql = f"INSERT INTO {model._meta.db_table} ({target}) SELECT {selected} FROM {relation}"
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    # In a pipeline(), the insert runs while the caller goes on.
    send(sql, [*constants, *params])
