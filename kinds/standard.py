"""The standard kind: the JSON payload itself, for machines, signed (Standard Webhooks); no pace of its own.

Any HTTP receiver takes it, so where its URL holds a secret cannot be known: it is
shown by its host only (Kind.shown_url's default).
"""

from __future__ import annotations

from collections.abc import Mapping

from kinds.base import Kind, Mention


class Standard(Kind):
    name = "standard"
    label = "Standard Webhooks JSON"
    signed = True

    # It mentions nobody (no mention_field): a machine's receiver gets the payload as it is.
    def body(self, payload: Mapping, *, mention: Mention | None = None) -> dict:
        # The very dict: the default destination's bodies stay byte for byte what they were.
        return payload if isinstance(payload, dict) else dict(payload)

    def digest_body(self, payload: Mapping, *, mentions: Mapping[str, Mention] | None = None) -> dict:
        # Every occurrence with its key, however many: a machine's receiver has no service limit to fit.
        return payload if isinstance(payload, dict) else dict(payload)
