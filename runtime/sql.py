"""Set-based statements written once for PostgreSQL and the embedded SQLite of `make run`.

The hot paths (the scheduler's claim, the worker's claim and record) move a
whole batch per statement: `UPDATE ... FROM <rows>` and `INSERT ... SELECT`.
PostgreSQL receives a batch as one array per column (`unnest`), which psycopg
dumps in C; SQLite, which has no arrays, gets a VALUES list. Values are
adapted by the model fields, so a UUID or an aware datetime means the same
thing on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC

from django.db import connection, models
from django.utils import timezone


def is_postgresql() -> bool:
    return connection.vendor == "postgresql"


def skip_locked(*, of: str = "") -> str:
    """Row locks (on table alias `of`) that skip rows others hold; SQLite serialises writers instead."""
    if not is_postgresql():
        return ""
    return f" FOR UPDATE OF {of} SKIP LOCKED" if of else " FOR UPDATE SKIP LOCKED"


def rows_relation(alias: str, columns: Sequence[tuple[str, models.Field]], rows: Sequence[tuple]) -> tuple[str, list]:
    """A FROM-clause relation named `alias` whose columns hold `rows`, and its parameters.

    `columns` names each column and the model field whose type it has.
    """
    names = [name for name, _ in columns]
    if is_postgresql():
        arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for _, field in columns)
        values = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in columns]
        return f"unnest({arrays}) AS {alias}({', '.join(names)})", values
    params: list = []
    for row in rows:
        params.extend(
            field.get_db_prep_value(value, connection) for (_, field), value in zip(columns, row, strict=True)
        )
    one_row = "(" + ", ".join(["%s"] * len(columns)) + ")"
    selected = ", ".join(f"column{i + 1} AS {name}" for i, name in enumerate(names))
    return f"(SELECT {selected} FROM (VALUES {', '.join([one_row] * len(rows))})) AS {alias}", params


def typed_rows(rows: list[tuple], fields: Sequence[models.Field]) -> list[tuple]:
    """Rows fetched with raw SQL, with the Python types the ORM would give.

    psycopg already returns UUIDs, dates and aware datetimes; SQLite returns
    text, which the fields convert.
    """
    if is_postgresql():
        return rows
    converted = []
    for row in rows:
        values = []
        for field, value in zip(fields, row, strict=True):
            value = field.to_python(value) if value is not None else None
            if isinstance(field, models.DateTimeField) and value is not None and timezone.is_naive(value):
                value = timezone.make_aware(value, UTC)
            values.append(value)
        converted.append(tuple(values))
    return converted


def insert_rows(
    model: type[models.Model], columns: Sequence[str], rows: Sequence[tuple], *, ignore_conflicts: bool = False
) -> int:
    """Insert plain tuples whose values follow `columns` (attribute names) in one statement.

    Returns how many rows went in (with `ignore_conflicts`, rows that would break a
    unique constraint are skipped, as `ON CONFLICT DO NOTHING`).
    """
    if not rows:
        return 0
    fields = [model._meta.get_field(name) for name in columns]
    relation, params = rows_relation("v", list(zip([f.column for f in fields], fields, strict=True)), rows)
    quoted = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    # `WHERE true`: SQLite needs it to tell ON CONFLICT from a join's ON.
    sql = f"INSERT INTO {model._meta.db_table} ({quoted}) SELECT {quoted} FROM {relation} WHERE true"
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount
