"""The kinds of destination: one module each, behind kinds.base.Kind, and their registry.

A destination's `format` names its kind. A new kind on an existing transport (an
SMS gateway with an HTTP API) is one module here, one line below and a migration
(delivery.models takes its format choices from this registry). A kind on a new
transport (email, over SMTP) takes more: that transport in delivery/receivers/ and
one line in its registry (delivery.receivers.transports), and whatever its
destinations hold besides a URL (a relay's From and password: fields, a check, the
API and the console). docs/design.md, "Adding a kind of destination", lists it all.
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
