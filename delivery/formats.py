"""A destination's body: the standard payload, or the shape a chat service's incoming webhook accepts.

Pure functions of the standard payload (delivery.payload), whose `message` the
event type's template rendered: every format carries the same text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from delivery.models import DestinationFormat

# Discord refuses a `content` longer than this.
DISCORD_CONTENT_MAX = 2000
ELLIPSIS = "…"


def _standard(payload: dict) -> dict:
    # The very dict: the default destination's bodies stay byte for byte what they were.
    return payload


def _slack(payload: dict) -> dict:
    return {"text": payload["message"]}


def _discord(payload: dict) -> dict:
    message = payload["message"]
    if len(message) > DISCORD_CONTENT_MAX:
        message = message[: DISCORD_CONTENT_MAX - len(ELLIPSIS)] + ELLIPSIS
    return {"content": message}


def _teams(payload: dict) -> dict:
    return {
        "@type": "MessageCard",
        "@context": "https://schema.org/extensions",
        # Shown in notifications and required when a card has no title.
        "summary": payload["message"],
        "text": payload["message"],
    }


_FORMATTERS: Mapping[str, Callable[[dict], dict]] = {
    DestinationFormat.STANDARD: _standard,
    DestinationFormat.SLACK: _slack,
    DestinationFormat.DISCORD: _discord,
    DestinationFormat.TEAMS: _teams,
}


def body_format(*, format: str, payload: dict) -> dict:  # noqa: A002 - the destination's field
    """The body a destination of `format` is sent for the standard `payload`."""
    return _FORMATTERS[format](payload)
