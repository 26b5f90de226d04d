"""Searching the whole database for a person: every text-like column of every table."""

from __future__ import annotations

from django.db import connection

# Every type a name or an id can be stored in, as information_schema names them.
TEXT_LIKE = ("text", "character varying", "character", "uuid", "json", "jsonb")


def text_like_columns() -> list[tuple[str, str]]:
    """(table, column) of every text-like column of every table in the database's schema."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.table_name, c.column_name FROM information_schema.columns c "
            "JOIN information_schema.tables t ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
            "WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' AND c.data_type = ANY(%s) "
            "ORDER BY 1, 2",
            [list(TEXT_LIKE)],
        )
        return cursor.fetchall()


def traces(*needles: str) -> dict[tuple[str, str], list[str]]:
    """Where any of `needles` occurs, case ignored, anywhere in a value: {(table, column): [needles found]}."""
    quote = connection.ops.quote_name
    found: dict[tuple[str, str], list[str]] = {}
    with connection.cursor() as cursor:
        for table, column in text_like_columns():
            for needle in needles:
                cursor.execute(
                    f"SELECT EXISTS (SELECT 1 FROM {quote(table)} WHERE {quote(column)}::text ILIKE %s)",
                    [f"%{needle}%"],
                )
                if cursor.fetchone()[0]:
                    found.setdefault((table, column), []).append(needle)
    return found
