"""Structured logs: every line carries the ids passed with extra={...}."""

import json
import logging
import sys

from django.conf import settings
from django.utils.module_loading import import_string

from config.logging import TextFormatter


def configured(name: str) -> logging.Formatter:
    """The formatter the LOGGING setting builds under `name`."""
    spec = dict(settings.LOGGING["formatters"][name])
    return import_string(spec.pop("()"))(**spec)


def make_record(**extra) -> logging.LogRecord:
    record = logging.LogRecord(
        "delivery.services", logging.INFO, __file__, 1, "Delivery attempt %s", ("delivered",), None
    )
    record.__dict__.update(extra)
    return record


FIELDS = {
    "event_id": "5e1f",
    "user_id": "0b4c",
    "idempotency_key": "event-0123456789abcdef",
    "attempt": 2,
    "status": 200,
    "duration_ms": 41,
}


def test_json_lines_carry_message_level_and_every_extra_field():
    line = configured("json").format(make_record(**FIELDS))

    payload = json.loads(line)
    assert payload["message"] == "Delivery attempt delivered"
    assert payload["level"] == "INFO"
    assert payload["logger"] == "delivery.services"
    assert payload["time"].endswith("+00:00")
    assert {k: payload[k] for k in FIELDS} == FIELDS
    assert "\n" not in line


def test_a_json_line_carries_the_exception_and_turns_other_values_into_text():
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        record = logging.LogRecord(
            "delivery.worker.loop", logging.ERROR, __file__, 1, "Boom", (), sys.exc_info()
        )
    record.event_id = object()

    payload = json.loads(configured("json").format(record))

    assert "ZeroDivisionError: division by zero" in payload["exception"]
    assert payload["event_id"].startswith("<object object at")


def test_text_lines_carry_the_extra_fields_as_key_value_pairs():
    line = TextFormatter().format(make_record(**FIELDS))

    assert "Delivery attempt delivered" in line
    assert "idempotency_key=event-0123456789abcdef" in line
    assert "attempt=2" in line and "duration_ms=41" in line
