"""The standard kind: the JSON payload itself, for machines, signed (Standard Webhooks); no pace of its own."""

from __future__ import annotations

from collections.abc import Mapping

from channels.base import Channel


class Standard(Channel):
    name = "standard"
    label = "Standard Webhooks JSON"

    def body(self, payload: Mapping) -> dict:
        # The very dict: the default destination's bodies stay byte for byte what they were.
        return payload if isinstance(payload, dict) else dict(payload)
