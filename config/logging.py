"""The text log formatter: one line per record, with the `extra={...}` fields (event id, key, attempt...).

JSON lines come from python-json-logger (config.settings.LOGGING).
"""

import logging
import re
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


# A calendar feed's URL carries its token, a credential (delivery.upcoming.feeds): the path of any
# request for one is logged with the token replaced.
CALENDAR_FEED_PATH = re.compile(r"(/calendar/)[^/\s'\"?]+(\.ics)")
REDACTED = r"\1[redacted]\2"


def redact_paths(text: str) -> str:
    """`text` with every calendar feed token in it replaced."""
    return CALENDAR_FEED_PATH.sub(REDACTED, text) if "/calendar/" in text else text


class RedactFeedTokens(logging.Filter):
    """Takes calendar feed tokens out of a record's message and of the request it carries (django.request's
    "Not Found: <path>" with `request=<WSGIRequest: GET '<path>'>`), before any formatter reads them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_paths(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        request = getattr(record, "request", None)
        if request is not None and "/calendar/" in str(request):
            record.request = redact_paths(str(request))
        return True
