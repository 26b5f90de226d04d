"""Parse the duration strings used by settings ("48h", "90m", "10s", "1.5")."""

import re
from datetime import timedelta

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: str | int | float | timedelta) -> timedelta:
    """Return a timedelta for a number of seconds or a number with a unit suffix."""
    if isinstance(value, timedelta):
        return value
    match = _PATTERN.match(str(value))
    if not match:
        raise ValueError(
            f"Invalid duration {value!r}: use a number of seconds or a number with "
            "one of the units ms, s, m, h, d (for example 48h)."
        )
    number, unit = match.groups()
    return timedelta(seconds=float(number) * _UNITS[unit or "s"])
