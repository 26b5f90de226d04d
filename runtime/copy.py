"""Fast multi-row INSERTs through PostgreSQL's COPY.

Django's bulk_create spends most of its time building SQL and dumping
parameters on the client, a large part of the bulk import's time and of the
scheduler's claim. COPY streams the same rows without that work, inside the
caller's transaction. Signals are not sent, as with bulk_create.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import connection, models
from psycopg.copy import QueuedLibpqWriter
from psycopg.types.json import Jsonb

from runtime.sql import column_field


def copy_rows(
    model: type[models.Model],
    columns: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
    *,
    same_for_all: Mapping[str, Any] | None = None,
) -> None:
    """Insert plain tuples whose values follow `columns` (attribute names).

    `same_for_all` gives columns whose value is the same on every row.
    """
    if not rows:
        return
    if same_for_all:
        columns = [*columns, *same_for_all]
        shared = tuple(same_for_all.values())
        rows = [row + shared for row in rows]
    fields = [column_field(model, c) for c in columns]
    quoted = ", ".join(connection.ops.quote_name(column) for column, _ in fields)
    json_positions = [i for i, (_, f) in enumerate(fields) if isinstance(f, models.JSONField)]
    # The raw cursor's errors come out as Django's (an IntegrityError for a
    # duplicate key), as every other write's do.
    with connection.cursor() as cursor, connection.wrap_database_errors:
        raw_cursor = cursor.cursor
        # The queued writer sends from a background thread, so PostgreSQL
        # ingests one block while Python formats the next.
        with raw_cursor.copy(
            f"COPY {model._meta.db_table} ({quoted}) FROM STDIN", writer=QueuedLibpqWriter(raw_cursor)
        ) as copy:
            if not json_positions:
                for row in rows:
                    copy.write_row(row)
                return
            for row in rows:
                values = list(row)
                for i in json_positions:
                    if values[i] is not None:
                        values[i] = Jsonb(values[i])
                copy.write_row(values)
