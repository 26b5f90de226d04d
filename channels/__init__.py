"""The kinds of destination: one module each, behind channels.base.Channel, and their registry.

A destination's `format` names its kind. A new kind (email, a queue) is one
module here and one line below; delivery.models takes its format choices from
this registry, so a migration records the new value.
"""

from __future__ import annotations

from collections.abc import Mapping

from channels.base import Channel, Reading, Verdict
from channels.discord import Discord
from channels.slack import Slack
from channels.standard import Standard
from channels.teams import Teams
from channels.teams_messagecard import TeamsMessageCard

CHANNELS: Mapping[str, Channel] = {
    channel.name: channel for channel in (Standard(), Slack(), Discord(), Teams(), TeamsMessageCard())
}
STANDARD = CHANNELS["standard"]

__all__ = ["CHANNELS", "STANDARD", "Channel", "Reading", "Verdict", "channel_for"]


def channel_for(format: str) -> Channel:  # noqa: A002 - the destination's field
    """The kind of destination whose format is `format`."""
    return CHANNELS[format]
