"""Bulk-import recipients from CSV: validate every row, then create or update them in batches."""

import csv
import getpass
import sys
import time
from collections.abc import Callable
from datetime import date
from typing import cast

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, models

from scheduling.labels import labels_from_text
from scheduling.pauses import ACTOR_MAX_LENGTH
from users.fields import FIELDS_BY_NAME, RECIPIENT_FIELDS, USER_FIELDS, clean_user_fields, clean_visibility
from users.models import User
from users.services import ExternalIdTaken, users_import

# A recipient's fields (users.fields), each a column of its name.
REQUIRED_COLUMNS = tuple(field.name for field in RECIPIENT_FIELDS if field.required)
# Written only when the file has the column: a file without it leaves the
# stored value of a recipient it updates as it is.
OPTIONAL_COLUMNS = tuple(field.name for field in RECIPIENT_FIELDS if not field.required)
# Every column a file may have. Any other is refused, as the API refuses unknown
# fields: a typo (send_tme, pasued) would otherwise be ignored and its column's
# values lost without a word (nobody paused, everyone greeted at 09:00).
KNOWN_COLUMNS = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
# How much of a cell the report quotes.
CELL_SHOWN_CHARS = 40
# A paused cell, in any case; empty: not paused.
PAUSED_VALUES = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False, "": False}
# Printing a million bad rows helps nobody; the count is always reported.
MAX_ERRORS_SHOWN = 200


def _parse_date(raw: str | None) -> date | str | None:
    """A cell as a date; None if empty (no anniversary date; clears one on an update)."""
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        return raw  # clean_user_fields reports it as not a date


def _parse_send_time(raw: str | None) -> str | None:
    """A cell as a send time to check; None if empty (the default; clears one on an update)."""
    # Trimmed like the dates: a space after the comma is the file's layout, not the time.
    return (raw or "").strip() or None


def _parse_labels(raw: str | None) -> list[str]:
    """A labels cell (team:platform;office:berlin) as a list to check; empty: none (clears them on an update)."""
    return labels_from_text(raw)


def _parse_paused(raw: str | None) -> bool:
    """A paused cell as a flag: true/false, 1/0, yes/no in any case; empty: not paused."""
    try:
        return PAUSED_VALUES[(raw or "").strip().lower()]
    except KeyError:
        raise ValidationError(
            f"Must be true or false (or 1/0, yes/no; empty: not paused), not {raw!r}."
        ) from None


def _parse_optional_flag(raw: str | None) -> bool | str | None:
    """A cell such as mention_consent as a flag: true/false, 1/0, yes/no in any case; empty: None (the
    default). Anything else is passed on for the field's cleaner to refuse by name."""
    return _parse_flag(raw) if (raw or "").strip() else None


def _parse_flag(raw: str | None) -> bool | str:
    """A yes-or-no cell (hide_age) as a flag, by the paused column's words; else as it is, for its cleaner to refuse."""
    flag = PAUSED_VALUES.get((raw or "").strip().lower())
    return raw or "" if flag is None else flag


def _parse_visibility(raw: str | None) -> dict[str, str | None]:
    """A visibility cell (BIRTHDAY:private;ANNIVERSARY:default) as the API's object; empty: {} (unchanged).

    An event type in any case; "default" (or nothing after the colon) for the company default.
    """
    chosen: dict[str, str | None] = {}
    # Separated as labels are on a line (commas or semicolons): one rule for list cells.
    for item in labels_from_text(raw):
        event_type, colon, visibility = item.partition(":")
        if not colon:
            raise ValidationError(f"{item.strip()!r} is not TYPE:visibility, such as BIRTHDAY:private.")
        value = visibility.strip().lower()
        chosen[event_type.strip().upper()] = None if value in ("", "default") else value
    return clean_visibility(chosen)


def _parse_text(raw: str | None) -> str:
    """A text cell as it is, to check; "" for a cell a short row lacks."""
    return raw or ""


def _cell_parser(name: str) -> Callable[[str | None], object]:
    """How a column's cell is read before its field's cleaner checks it: by the column's type."""
    field = User._meta.get_field(name)
    if isinstance(field, models.BooleanField):
        # A nullable flag (mention_consent) leaves an empty cell to the company default.
        return _parse_optional_flag if field.null else _parse_flag
    if isinstance(field, ArrayField):
        return _parse_labels
    if isinstance(field, models.TimeField):
        return _parse_send_time
    if isinstance(field, models.DateField):
        return _parse_date
    return _parse_text


# The columns clean_user_fields checks (all but paused), each with its cell's parser.
_CELL_PARSERS = {name: _cell_parser(name) for name in USER_FIELDS}


def _parse_row(row: dict, *, columns: tuple[str, ...]) -> dict:
    """The row's cleaned values of `columns`; one ValidationError naming every bad field."""
    errors: dict[str, list[str]] = {}
    try:
        cleaned = clean_user_fields({name: parse(row.get(name)) for name, parse in _CELL_PARSERS.items()})
    except ValidationError as exc:
        cleaned, errors = {}, exc.message_dict
    # Not one of the fields clean_user_fields checks: the API's serializer checks its own flag.
    if "paused" in columns:
        try:
            cleaned["paused"] = _parse_paused(row.get("paused"))
        except ValidationError as exc:
            errors["paused"] = exc.messages
    if "visibility" in columns:
        try:
            cleaned["visibility"] = _parse_visibility(row.get("visibility"))
        except ValidationError as exc:
            errors["visibility"] = exc.messages
    if errors:
        raise ValidationError(errors)
    return {column: cleaned[column] for column in columns}


# The key DictReader keeps a row's cells beyond the header under. No column can be named so:
# a header naming anything but KNOWN_COLUMNS is refused before any row is read.
EXTRA_CELLS = "(cells beyond the header)"


def _check_header(header: list[str]) -> None:
    """Refuse a header that lacks a required column, names one twice or names one no recipient has."""
    problems = []
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    unknown = [f"{c!r} (column {number})" for number, c in enumerate(header, 1) if c not in KNOWN_COLUMNS]
    if unknown:
        problems.append(f"unknown column(s) {', '.join(unknown)}")
    twice = sorted({c for c in header if c in KNOWN_COLUMNS and header.count(c) > 1})
    if twice:
        problems.append(f"named twice: {', '.join(twice)}")
    if problems:
        raise CommandError(
            f"line 1: {'; '.join(problems)}. The CSV header names the columns {', '.join(REQUIRED_COLUMNS)} "
            f"and any of {', '.join(OPTIONAL_COLUMNS)}, each once; nothing was imported."
        )


def _extra_cells_problem(extra: list[str], *, columns: int) -> str:
    def shown(cell: str) -> str:
        return repr(cell if len(cell) <= CELL_SHOWN_CHARS else cell[:CELL_SHOWN_CHARS] + "…")

    cells = ", ".join(f"cell {columns + n} {shown(cell)}" for n, cell in enumerate(extra, 1))
    return f"{len(extra)} cell(s) beyond the header's {columns} columns: {cells}"


def _described(columns: tuple[str, ...]) -> str:
    """The columns with their help (users.fields), as a sentence lists them: "a, b (…) and c"."""
    named = [
        f"{name} ({FIELDS_BY_NAME[name].column_help})" if FIELDS_BY_NAME[name].column_help else name
        for name in columns
    ]
    return f"{', '.join(named[:-1])} and {named[-1]}"


class Command(BaseCommand):
    help = (
        f"Import recipients from a CSV file with the columns {_described(REQUIRED_COLUMNS)}, and optionally "
        f"{_described(OPTIONAL_COLUMNS)}. A header naming any other column is refused (a typo would "
        "lose that column's values), and so is a row with more cells than the header. Every row is "
        "checked first; if any is bad, the bad rows are listed by line number and nothing is imported "
        "(unless --skip-invalid)."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", help="CSV file path, or - for standard input")
        parser.add_argument(
            "--batch-size", type=int, default=20000, help="Users per transaction (default 20,000)."
        )
        parser.add_argument(
            "--skip-invalid",
            action="store_true",
            help="Import the valid rows even if some rows are bad (bad rows are listed).",
        )
        parser.add_argument("--dry-run", action="store_true", help="Validate only; import nothing.")
        parser.add_argument(
            "--by",
            default=None,
            help="Who the pauses and resumes of the paused column are recorded as made by, as an "
            "operator's in the console (default: the account running the command, as 'import_users "
            "(<login>)').",
        )

    def handle(self, *args, file, batch_size, skip_invalid, dry_run, by, **options):
        started = time.monotonic()
        by = self._actor(by)
        stream = sys.stdin if file == "-" else self._open(file)
        try:
            valid_rows, errors = self._validate(stream)
        finally:
            if stream is not sys.stdin:
                stream.close()
        validated = time.monotonic()

        for line, message in errors[:MAX_ERRORS_SHOWN]:
            self.stderr.write(f"line {line}: {message}")
        if len(errors) > MAX_ERRORS_SHOWN:
            self.stderr.write(f"... and {len(errors) - MAX_ERRORS_SHOWN} more bad rows")
        if errors and not skip_invalid:
            raise CommandError(
                f"{len(errors)} bad row(s) out of {len(errors) + len(valid_rows)}; "
                "nothing was imported. Fix them, or pass --skip-invalid."
            )
        if dry_run:
            self.stdout.write(
                f"{len(valid_rows)} valid row(s), {len(errors)} bad; dry run, nothing imported."
            )
            return

        try:
            result = users_import(rows=valid_rows, batch_size=batch_size, by=by)
        except ExternalIdTaken as exc:
            raise CommandError(
                f"{exc.messages[0]} The batches written before it stay. Run the import again to "
                "finish it: rows are matched by external_id, so those already written are not "
                "created twice (rows without an external_id would be)."
            ) from exc
        # Fresh rows leave the planner guessing until autovacuum's first
        # ANALYZE; the claim query must not run on a guess (on a freshly
        # loaded table its plan is several times slower than after ANALYZE).
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE users_user; ANALYZE scheduling_event;")
        finished = time.monotonic()
        rate = result.total / (finished - started) if finished > started else float(result.total)
        self.stdout.write(
            f"Imported {result.total} user(s) with their events in {finished - started:.1f} s "
            f"({rate:,.0f} rows/s; validation {validated - started:.1f} s): {result.created} created, "
            f"{result.updated} updated, {result.unchanged} unchanged"
            + (f"; skipped {len(errors)} bad row(s)" if errors else "")
        )

    def _actor(self, by: str | None) -> str:
        if by is None:
            try:
                login = getpass.getuser()
            except (OSError, KeyError):  # no login name in the environment nor the password database
                login = "unknown"
            return f"import_users ({login})"[:ACTOR_MAX_LENGTH]
        by = by.strip()
        if not by or len(by) > ACTOR_MAX_LENGTH:
            raise CommandError(f"--by must name who runs the import, in 1 to {ACTOR_MAX_LENGTH} characters.")
        return by

    def _open(self, path: str):
        try:
            return open(path, newline="", encoding="utf-8-sig")
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}") from None

    def _validate(self, stream) -> tuple[list[dict], list[tuple[int, str]]]:
        # Cells beyond the header's columns are kept under EXTRA_CELLS, to be refused (DictReader's
        # default drops them under a key None that nothing reads).
        reader = csv.DictReader(stream, restkey=EXTRA_CELLS)
        header = list(reader.fieldnames or [])
        _check_header(header)
        columns = REQUIRED_COLUMNS + tuple(c for c in OPTIONAL_COLUMNS if c in header)
        valid_rows: list[dict] = []
        errors: list[tuple[int, str]] = []
        # The line each external id was first seen on. An id twice in one file
        # would be one recipient written twice, the second write undoing the first.
        first_line: dict[str, int] = {}
        for row in reader:
            problems = []
            # DictReader keeps the cells beyond the header as a list under restkey (typeshed says str).
            extra = cast("list[str] | None", row.pop(EXTRA_CELLS, None))
            if extra:
                problems.append(_extra_cells_problem(extra, columns=len(header)))
            try:
                cleaned = _parse_row(row, columns=columns)
            except ValidationError as exc:
                problems += [f"{field}: {' '.join(messages)}" for field, messages in exc.message_dict.items()]
            external_id = (row.get("external_id") or "").strip()
            if external_id:
                first = first_line.setdefault(external_id, reader.line_num)
                if first != reader.line_num:
                    problems.append(
                        f"external_id: {external_id!r} is also on line {first}; each id may appear once."
                    )
            if problems:
                errors.append((reader.line_num, "; ".join(problems)))
            else:
                valid_rows.append(cleaned)
        return valid_rows, errors
