"""The grace after an outage (delivery.rules.takeover.TakeoverGrace) as a table of instants."""

import pytest

from delivery.rules.takeover import TAKEOVER_GRACE_BEYOND_TIMEOUT, TakeoverGrace

TIMEOUT, HELD_UP_AFTER = 10.0, 4.0
GRACE = TIMEOUT + TAKEOVER_GRACE_BEYOND_TIMEOUT


def grace() -> TakeoverGrace:
    return TakeoverGrace(timeout=TIMEOUT, held_up_after=HELD_UP_AFTER, now_mono=100.0)


@pytest.mark.parametrize(
    "events, at, recovery_due, may_take_over",
    [
        # a worker just started takes over expired leases at once
        ([], 100.0, False, True),
        # steps as quick as a lease renewal change nothing
        ([("stepped", 103.0), ("stepped", 107.0)], 107.0, False, True),
        # an error: keep what it holds first, take over nothing until the grace has passed
        ([("lost", 110.0)], 110.0, True, False),
        ([("lost", 110.0)], 110.0 + GRACE - 0.1, True, False),
        ([("lost", 110.0), ("recovered", 111.0)], 110.0 + GRACE - 0.1, False, False),
        ([("lost", 110.0), ("recovered", 111.0)], 110.0 + GRACE, False, True),
        # a step held longer than a lease renewal, no error seen: an outage all the same, from its end
        ([("stepped", 105.0)], 105.0, True, False),
        ([("stepped", 105.0), ("recovered", 105.5)], 105.0 + GRACE, False, True),
        # a rest is not being held up: sleeping 30 s, then a quick step
        ([("rested", 130.0), ("stepped", 131.0)], 131.0, False, True),
        # a second outage during the grace starts it again from the second
        ([("lost", 110.0), ("recovered", 111.0), ("lost", 115.0)], 110.0 + GRACE, True, False),
        # while a recovery is due, a long step is not a new outage (the recovery's own statements may be slow)
        ([("lost", 110.0), ("stepped", 118.0)], 110.0 + GRACE, True, True),
    ],
)
def test_the_takeover_grace_follows_outages_and_slow_steps(events, at, recovery_due, may_take_over):
    followed = grace()

    for event, now_mono in events:
        if event == "recovered":
            followed.recovered()
        else:
            getattr(followed, event)(now_mono)

    assert (followed.recovery_due, followed.may_take_over(at)) == (recovery_due, may_take_over)


def test_a_step_held_too_long_says_how_long_it_held():
    followed = grace()

    assert followed.stepped(102.0) is None
    assert followed.stepped(102.0 + HELD_UP_AFTER + 1.5) == pytest.approx(HELD_UP_AFTER + 1.5)
