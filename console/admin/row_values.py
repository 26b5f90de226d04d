"""Values a change list reads once for its whole page, kept on each row for its columns.

A model does not declare what the console reads about it (a destination's health, an
endpoint's backlog): those readers sit above the models. The page keeps them on the row's
instance instead, and a column of a single row (the change page) reads its own when the
list did not.
"""

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def row_value_set(row: Any, name: str, value: object) -> None:
    """Keep `value` on `row` as what the page read for it."""
    row.__dict__[name] = value


def row_value(row: Any, name: str, read: Callable[[], T]) -> T:
    """What the page read for `row`, or `read()` for this row alone when the page did not."""
    if name not in row.__dict__:
        row.__dict__[name] = read()
    value: T = row.__dict__[name]
    return value
