"""Counting rows by one column, the shape the console, the metrics and the probes share; or estimating them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Count, Model, QuerySet

from runtime.sql import column_field


def counts_by(queryset: QuerySet[Any], *, field: str, keys: Iterable[str]) -> dict[str, int]:
    """Rows of `queryset` per value of `field`, every one of `keys` present (zero if none).

    One GROUP BY counting rows (COUNT(*), not a column), so an index holding
    the filter's columns and `field` answers it without reading the rows.
    """
    counts = dict.fromkeys(keys, 0)
    counts.update(queryset.values(field).annotate(count=Count("*")).order_by().values_list(field, "count"))
    return counts


def estimated_counts_by(model: type[Model], *, field: str, keys: Iterable[str]) -> dict[str, int]:
    """PostgreSQL's estimate of `model`'s rows per value of `field` (every one of `keys` present), reading no row.

    The table's row estimate (pg_class.reltuples) times each value's share in
    the column's statistics (pg_stats.most_common_vals/_freqs), both as of the
    table's last VACUUM or ANALYZE, which autovacuum repeats as the table grows:
    a figure for sizes and trends, not for alerting on a single row. A value
    too rare for the statistics' sample reads 0; 0 for all before the first
    ANALYZE.
    """
    table = model._meta.db_table
    column, _ = column_field(model, field)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT greatest(c.reltuples, 0), s.most_common_vals::text::text[], s.most_common_freqs
            FROM pg_class c
            LEFT JOIN pg_stats s
              ON s.schemaname = current_schema() AND s.tablename = c.relname AND s.attname = %s
            WHERE c.oid = %s::regclass
            """,
            [column, connection.ops.quote_name(table)],
        )
        rows, values, freqs = cursor.fetchone()
    estimates = dict.fromkeys(keys, 0)
    for value, freq in zip(values or [], freqs or [], strict=True):
        if value in estimates:
            estimates[value] = round(rows * freq)
    return estimates


def estimated_index_entries(*, index: str) -> int:
    """PostgreSQL's estimate of the entries in `index`, reading no row: the index's own pg_class.reltuples.

    VACUUM counts every entry of every index it cleans, so as of the table's
    last vacuum the figure is exact; an ANALYZE since then sets it from its
    sample instead (the share of the sampled rows a partial index's condition
    admits, times the table's rows). Neither runs on every write: the figure
    trails the rows by up to autovacuum's interval. A partial index holds one
    entry per row its condition admits, so this estimates those rows.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT greatest(reltuples, 0) FROM pg_class WHERE oid = %s::regclass",
            [connection.ops.quote_name(index)],
        )
        (entries,) = cursor.fetchone()
    return round(float(entries))
