"""A destination's settings as a lane sees them (delivery.receivers.lane_settings): each default decided in one place."""

from datetime import timedelta

import pytest

from delivery.receivers.lane_settings import LaneSettings, lane_settings
from kinds import kind_for


@pytest.fixture
def fleet(settings):
    settings.WEBHOOK_MAX_RATE = 50.0
    settings.WEBHOOK_MAX_IN_FLIGHT = 8
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=10)
    return settings


@pytest.mark.parametrize(
    "own, expected",
    [
        # nothing of its own: the fleet's settings
        ({}, LaneSettings(max_rate=50.0, max_in_flight=8, timeout=10.0)),
        # its own, each in place of the fleet's
        ({"max_rate": 2.5}, LaneSettings(max_rate=2.5, max_in_flight=8, timeout=10.0)),
        ({"max_in_flight": 1}, LaneSettings(max_rate=50.0, max_in_flight=1, timeout=10.0)),
        ({"timeout": timedelta(seconds=2)}, LaneSettings(max_rate=50.0, max_in_flight=8, timeout=2.0)),
        # secrets, newest first, as given
        (
            {"secrets": ["whsec_b", "whsec_a"]},
            LaneSettings(50.0, 8, 10.0, signing_secrets=("whsec_b", "whsec_a")),
        ),
        # a chat format: its service's pace, below the fleet's rate; the other defaults the same
        (
            {"format": "slack"},
            LaneSettings(max_rate=1.0, max_in_flight=8, timeout=10.0, channel=kind_for("slack")),
        ),
        # its own rate wins over its service's pace
        (
            {"format": "discord", "max_rate": 20.0},
            LaneSettings(max_rate=20.0, max_in_flight=8, timeout=10.0, channel=kind_for("discord")),
        ),
    ],
)
def test_a_lanes_settings_take_the_destinations_own_else_the_fleets(fleet, own, expected):
    assert lane_settings(**own) == expected


def test_settings_are_one_value_and_an_equal_one_keeps_its_signer(fleet):
    first = lane_settings(secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])
    again = lane_settings(secrets=["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"])

    assert first == again and first.signer is first.signer
    assert lane_settings().signer is None
    with pytest.raises(AttributeError):
        first.max_rate = 1.0  # frozen: replaced whole, never edited
