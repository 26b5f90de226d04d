"""The text log formatter: one line per record, with the `extra={...}` fields (event id, key, attempt...).

JSON lines come from python-json-logger (config.settings.LOGGING).
"""

import logging
from datetime import UTC, datetime

# Attributes every LogRecord has; anything else on a record came from `extra`.
_STANDARD_ATTRIBUTES = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


def _extra_fields(record: logging.LogRecord) -> dict:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD_ATTRIBUTES}


class TextFormatter(logging.Formatter):
    """`time level logger message key=value ...` for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
        line = f"{stamp}Z {record.levelname:<7} {record.name}: {record.getMessage()}"
        extras = _extra_fields(record)
        if extras:
            line += " " + " ".join(f"{k}={v}" for k, v in extras.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line
