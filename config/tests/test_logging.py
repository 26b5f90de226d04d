"""Structured logs: every line carries the ids passed with extra={...}."""

import json
import logging

from config.logging import JsonFormatter, TextFormatter


def make_record(**extra) -> logging.LogRecord:
    record = logging.LogRecord("delivery.services", logging.INFO, __file__, 1, "Delivery attempt %s", ("delivered",), None)
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
    line = JsonFormatter().format(make_record(**FIELDS))

    payload = json.loads(line)
    assert payload["message"] == "Delivery attempt delivered"
    assert payload["level"] == "INFO"
    assert payload["logger"] == "delivery.services"
    assert {k: payload[k] for k in FIELDS} == FIELDS
    assert "\n" not in line


def test_text_lines_carry_the_extra_fields_as_key_value_pairs():
    line = TextFormatter().format(make_record(**FIELDS))

    assert "Delivery attempt delivered" in line
    assert "idempotency_key=event-0123456789abcdef" in line
    assert "attempt=2" in line and "duration_ms=41" in line
