"""The kinds of destination: one module each, behind kinds.base.Kind, and their registry.

A destination's `format` names its kind. A new kind (an SMS gateway, email) is
one module here and one line below; if its transport is new (not "http"), also
that transport in delivery/receivers/ and one line in its registry
(delivery.receivers.transports). delivery.models takes its format choices from
this registry, so a migration records the new value. docs/design.md, "Adding a
kind of destination", says the whole of it.
"""

from __future__ import annotations

from collections.abc import Mapping

from kinds.base import Kind, Mention, Reading, Verdict
from kinds.discord import Discord
from kinds.email import Email
from kinds.slack import Slack
from kinds.standard import Standard
from kinds.teams import Teams
from kinds.teams_messagecard import TeamsMessageCard

KINDS: Mapping[str, Kind] = {
    channel.name: channel
    for channel in (Standard(), Slack(), Discord(), Teams(), TeamsMessageCard(), Email())
}
STANDARD = KINDS["standard"]

__all__ = ["KINDS", "STANDARD", "Kind", "Mention", "Reading", "Verdict", "kind_for"]


def kind_for(format: str) -> Kind:  # noqa: A002 - the destination's field
    """The kind of destination whose format is `format`."""
    return KINDS[format]
