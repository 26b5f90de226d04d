"""The sender's side of the rate slots: a request goes within its slot's second or not at all (delivery.rules.pace).

A fake transport that answers at once (or after `hold` seconds) and notes when each request began, by the wall
clock the slots are in; the sender's own event loop, run as the worker runs it.
"""

import asyncio
import time
import uuid
from datetime import UTC, datetime

import pytest

from delivery.models import AttemptOutcome
from delivery.receivers.lane_settings import LaneSettings
from delivery.receivers.protocol import ClaimedDelivery, SendResult
from delivery.rules.answers import Signal
from delivery.rules.limit import FixedLimit
from delivery.rules.pace import RateSlot
from delivery.worker.lane import Lane
from delivery.worker.sender import Sender


class FakeTransport:
    def __init__(self, *, hold: float = 0.0) -> None:
        self.hold = hold
        self.began: list[float] = []

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def send(self, delivery, *, url, settings) -> SendResult:
        self.began.append(time.time())
        await asyncio.sleep(self.hold)
        now = datetime.now(UTC)
        return SendResult(
            delivery=delivery,
            outcome=AttemptOutcome.DELIVERED,
            signal=Signal.SUCCESS,
            started_at=now,
            finished_at=now,
            duration_ms=int(self.hold * 1000),
            status_code=200,
            started_mono=time.monotonic(),
        )


def delivery() -> ClaimedDelivery:
    return ClaimedDelivery(
        id=uuid.uuid4(),
        event_id=uuid.uuid4(),
        idempotency_key=f"event-{uuid.uuid4().hex}",
        endpoint_key="receiver-test-key",
        body="{}",
        attempt=1,
        max_attempts=8,
    )


def rated_lane(*, limit: int = 10) -> Lane:
    return Lane(
        key="receiver-test-key",
        endpoint_id=1,
        url="http://receiver.test/webhook",
        name="receiver",
        limit=FixedLimit(limit),
        settings=LaneSettings(max_rate=100.0, max_in_flight=0, timeout=2.0),
    )


@pytest.fixture
def sender_with():
    made = []

    def make(transport: FakeTransport) -> Sender:
        sender = Sender(transports={"http": transport}, after_each=lambda: None)
        made.append(sender)
        return sender

    yield make
    for sender in made:
        sender.loop.close()


def run_until_idle(sender: Sender, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while sender.busy and time.monotonic() < deadline:
        sender.run(seconds=0.05, return_when=lambda: False)


def test_a_request_begins_at_its_slot_not_before(sender_with):
    transport = FakeTransport()
    sender, lane = sender_with(transport), rated_lane()
    at = time.time() + 0.1

    sender.start(lane, delivery(), slot=RateSlot(at=at, deadline=at + 0.5))
    run_until_idle(sender)

    assert len(transport.began) == 1 and at <= transport.began[0] < at + 0.5
    assert (len(sender.answers), lane.open, lane.not_begun) == (1, 0, 0)


def test_a_request_that_cannot_begin_before_its_slots_deadline_is_not_sent_and_waits_first_in_line(
    sender_with,
):
    # Given a request whose slot's second ended while the thread was away (its deadline is past)
    transport = FakeTransport()
    sender, lane = sender_with(transport), rated_lane()
    other = delivery()
    lane.waiting.append(other)
    late = delivery()
    past = time.time() - 0.01

    # When the sender gets to it
    sender.start(lane, late, slot=RateSlot(at=past - 0.5, deadline=past))
    run_until_idle(sender)

    # Then nothing went to the receiver, no answer is kept, and the delivery waits for a new slot before the others
    assert transport.began == []
    assert sender.answers == []
    assert list(lane.waiting) == [late, other]
    assert (lane.open, lane.not_begun) == (0, 0)


def test_a_request_whose_slot_came_while_the_lane_is_full_begins_when_one_ends_within_its_second(sender_with):
    # Given a lane limited to one open request, the first holding the receiver 0.1 s, the second's slot at once
    transport = FakeTransport(hold=0.1)
    sender, lane = sender_with(transport), rated_lane(limit=1)
    now = time.time()
    sender.start(lane, delivery(), slot=RateSlot(at=now, deadline=now + 0.8))
    sender.start(lane, delivery(), slot=RateSlot(at=now, deadline=now + 0.8))

    run_until_idle(sender)

    # Then the second began once the first ended, never two at once
    assert len(transport.began) == 2
    assert transport.began[1] - transport.began[0] >= 0.1 - 0.01
    assert len(sender.answers) == 2


def test_a_request_waiting_for_a_place_past_its_deadline_is_not_sent(sender_with):
    transport = FakeTransport(hold=0.3)
    sender, lane = sender_with(transport), rated_lane(limit=1)
    now = time.time()
    sender.start(lane, delivery(), slot=RateSlot(at=now, deadline=now + 0.8))
    second = delivery()
    sender.start(lane, second, slot=RateSlot(at=now, deadline=now + 0.1))

    run_until_idle(sender)

    assert len(transport.began) == 1
    assert list(lane.waiting) == [second]
    assert (lane.open, lane.not_begun) == (0, 0)


def capped_lane(*, limit: int = 10) -> Lane:
    """A lane under a fleet in-flight cap and no max rate: its requests have no slot."""
    return Lane(
        key="receiver-test-key",
        endpoint_id=1,
        url="http://receiver.test/webhook",
        name="receiver",
        limit=FixedLimit(limit),
        settings=LaneSettings(max_rate=0.0, max_in_flight=20, timeout=2.0),
    )


def test_a_request_handed_over_before_its_lanes_share_shrank_does_not_begin_past_the_new_share(sender_with):
    # Given a lane sharing a fleet cap of 20, whose share was 4 when 4 requests were handed to the sender
    transport = FakeTransport(hold=0.2)
    sender, lane = sender_with(transport), capped_lane()
    lane.grant_share(4)
    handed = [delivery() for _ in range(4)]
    sender.start(lane, handed[0], slot=None)
    run_until_idle(sender, seconds=0.05)  # the first begins
    for later in handed[1:]:
        sender.start(lane, later, slot=None)

    # When, before the event loop runs again, a refresh shrinks the share to 2 (another worker came), the permit
    # row counting the one request begun
    lane.grant_share(2)
    run_until_idle(sender)

    # Then only one more began beside the first (2 at once, the new share); the other two went back, first in line
    assert len(transport.began) == 2
    assert {d.id for d in lane.waiting} == {d.id for d in handed[2:]}
    assert (lane.open, lane.not_begun) == (0, 0)


def test_a_request_handed_over_does_not_begin_once_its_lanes_share_is_no_longer_usable(sender_with):
    # Given a lane whose share stops being usable (its permit row would expire before a request could end)
    transport = FakeTransport()
    sender, lane = sender_with(transport), capped_lane()
    lane.grant_share(20, usable_until_mono=time.monotonic() + 60)
    handed = delivery()
    sender.start(lane, handed, slot=None)

    # When the share's usable time passes before the request's first step
    lane.grant_share(20, usable_until_mono=time.monotonic() - 0.01)
    run_until_idle(sender)

    # Then it was not sent, and waits first in line for the next renewal
    assert transport.began == []
    assert list(lane.waiting) == [handed]


def answered(sender: Sender, count: int) -> list:
    """`count` answers held by `sender`, as requests that finished leave them."""
    transport = FakeTransport()
    sender.transport = transport
    lane = capped_lane()
    for _ in range(count):
        sender.start(lane, delivery(), slot=None)
    run_until_idle(sender)
    return list(sender.answers)


def test_answers_taken_to_be_recorded_are_no_longer_held_and_those_that_come_meanwhile_are_the_next_batch(
    sender_with,
):
    sender = sender_with(FakeTransport())
    first = answered(sender, 3)

    taken = sender.take_answers()
    later = answered(sender, 2)

    assert taken == first
    assert sender.answers == later


def test_answers_whose_record_failed_are_held_again_ahead_of_newer_ones_and_as_old_as_they_were(sender_with):
    sender = sender_with(FakeTransport())
    first = answered(sender, 3)
    oldest = sender.oldest_answer_mono
    taken = sender.take_answers()
    later = answered(sender, 2)

    sender.answers_back(taken)

    assert sender.answers == first + later
    assert sender.oldest_answer_mono == oldest
