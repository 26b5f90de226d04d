"""The worker's requests in flight: an asyncio event loop run in slices by the worker's one thread.

The execution half of the worker, as Oban keeps its executor apart from its
producer. Every request to a receiver is a coroutine on one event loop, so ten
open requests or two thousand cost about the same. The worker's thread runs
the loop for a slice, then leaves it to claim, record and talk to PostgreSQL;
while a claim or a record waits for the server, the loop runs again
(runtime.overlap), so the open requests are answered and their places refilled
meanwhile; during the other steps they wait in their sockets' buffers.

What may start is delivery.worker.lanes' decision; this module starts it, keeps the
answers until the worker records them, and stops the loop as soon as the
worker has something worth doing: answers to record, room to claim into.

It speaks the transport protocol (delivery.receivers.protocol) to one transport of
each name the kinds use, and sends each delivery through its lane's kind's: what
happens around a send (slots, turns, limits, shares, answers) is the same for all.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import NamedTuple

from delivery.metrics import ATTEMPT_DURATION, ATTEMPT_DURATION_BY_OUTCOME, RATE_SLOTS_MISSED
from delivery.receivers.protocol import ClaimedDelivery, SendResult, Transport
from delivery.rules.pace import RateSlot
from delivery.worker.lane import Lane

# Answers are recorded in batches; an answer waits at most this long to be recorded.
RECORD_LINGER = 0.05


class InFlight(NamedTuple):
    """A request started and not yet finished (a named tuple: one per request, made cheaply)."""

    lane: Lane
    delivery: ClaimedDelivery
    # Requests open to the lane when it started, itself included: the adaptive limit's sample.
    open_at_start: int
    # Whether it waits for a rate slot (a miss counts in RATE_SLOTS_MISSED).
    paced: bool


class Sender:
    """Starts requests on the event loop and collects their answers.

    `after_each` runs after every finished request, inside the loop (the
    worker starts what the freed room allows, without database work).
    """

    def __init__(self, *, transports: Mapping[str, Transport], after_each: Callable[[], None]) -> None:
        # By name (kinds.base.Kind.transport): delivery.receivers.transports.transports_make.
        self.transports = transports
        self.after_each = after_each
        self.loop = asyncio.new_event_loop()
        self.in_flight: dict[asyncio.Task, InFlight] = {}
        # Deliveries whose request has begun (a rate slot's wait is over).
        self.begun: set[uuid.UUID] = set()
        # Answers not yet recorded, and when the oldest of them came.
        self.answers: list[SendResult] = []
        self.oldest_answer_mono = 0.0
        # The oldest of the answers last taken to be recorded (take_answers), should they come back.
        self.taken_oldest_mono = 0.0
        # Started, then cancelled before their request began (a drain): still ours to hand back.
        self.cancelled: list[ClaimedDelivery] = []
        # While `run` runs the loop: what says it is time to give the thread back. None otherwise.
        self.return_when: Callable[[], bool] | None = None
        # Per lane, the requests whose slot came and that wait for one begun to end (Lane.may_begin).
        self.places: dict[Lane, deque[asyncio.Future]] = {}

    def open(self) -> None:
        for transport in self.transports.values():
            self.loop.run_until_complete(transport.open())

    def close(self) -> None:
        for transport in self.transports.values():
            self.loop.run_until_complete(transport.close())
        self.loop.close()

    @property
    def busy(self) -> bool:
        return bool(self.in_flight)

    def start(self, lane: Lane, delivery: ClaimedDelivery, *, slot: RateSlot | None) -> None:
        """Start sending `delivery` (within `slot` if it has a rate slot, then at its turn at the lane's learned
        rate); it counts as open to its lane at once."""
        open_at_start = lane.started(delivery)
        task = self.loop.create_task(self._send(lane, delivery, slot))
        self.in_flight[task] = InFlight(
            lane=lane, delivery=delivery, open_at_start=open_at_start, paced=slot is not None
        )
        task.add_done_callback(self._finished)

    async def _send(
        self, lane: Lane, delivery: ClaimedDelivery, slot: RateSlot | None
    ) -> tuple[SendResult, bool] | None:
        """The answer, and whether the request waited for its turn at the learned rate (the rate held it back);
        None if it could not begin (within its rate slot's second, or under the lane's limit and share), and was
        not sent."""
        if slot is not None:
            await asyncio.sleep(slot.at - time.time())
        waited_for_turn = False
        # Asked again after each wait: a cut meanwhile makes the turn later.
        while (wait := lane.turn_in(time.monotonic())) > 0:
            waited_for_turn = True
            await asyncio.sleep(wait)
        # It begins once those begun are under the lane's limit and share: a paced one waits for a place
        # within its slot's second; one without a slot found the lane full only because the limit or the
        # share shrank since it was handed over, and goes back first in line.
        while not lane.may_begin(time.monotonic()):
            if slot is None or not await self._place_freed(lane, until=slot.deadline):
                return None
        if slot is not None and time.time() >= slot.deadline:
            # Late for its second (the thread was away, the CPU taken, the turn far): sent now, it
            # would count in the next second, whose slots the fleet hands out in full to others.
            return None
        lane.begun(time.monotonic())
        self.begun.add(delivery.id)
        # Carried, signed, timed and read as the lane's destination says (delivery.worker.lanes follows its edits).
        settings = lane.settings
        transport = self.transports[settings.channel.transport]
        return await transport.send(delivery, url=lane.url, settings=settings), waited_for_turn

    async def _place_freed(self, lane: Lane, *, until: float) -> bool:
        """Wait until a request of `lane` ends (True) or `until` (time.time()) passes (False)."""
        freed = self.loop.create_future()
        self.places.setdefault(lane, deque()).append(freed)
        try:
            done, _ = await asyncio.wait([freed], timeout=max(0.0, until - time.time()))
        finally:
            freed.cancel()  # no longer waiting (a no-op once set): _free_place skips it
        return bool(done)

    def _free_place(self, lane: Lane) -> None:
        waiters = self.places.get(lane)
        while waiters:
            freed = waiters.popleft()
            if not freed.done():
                freed.set_result(None)
                return

    def run(self, *, seconds: float, return_when: Callable[[], bool]) -> None:
        """Run the loop until `return_when()` says so after a request finished, nothing is open, or `seconds` pass.

        Each finished request asks `return_when` itself (in `_finished`) and
        stops the loop then: one check per request, no wake-up task per request.
        """
        if not self.in_flight or return_when():
            return
        self.return_when = return_when
        deadline = self.loop.call_later(seconds, self.loop.stop)
        try:
            self.loop.run_forever()
        finally:
            deadline.cancel()
            self.return_when = None

    def _finished(self, task: asyncio.Task) -> None:
        flight = self.in_flight.pop(task)
        began = flight.delivery.id in self.begun
        self.begun.discard(flight.delivery.id)
        if task.cancelled():
            flight.lane.finished(flight.delivery, begun=began)
            self.cancelled.append(flight.delivery)
            return
        outcome = task.result()
        if outcome is None:
            flight.lane.missed(flight.delivery)
            if flight.paced:
                RATE_SLOTS_MISSED.labels(endpoint=flight.lane.name).inc()
        else:
            flight.lane.finished(flight.delivery, begun=True)
            self._free_place(flight.lane)
            result, waited_for_turn = outcome
            flight.lane.learn_from(
                result,
                open_at_start=flight.open_at_start,
                finished_mono=time.monotonic(),
                waited_for_turn=waited_for_turn,
            )
            duration = ATTEMPT_DURATION_BY_OUTCOME.get(result.outcome) or ATTEMPT_DURATION.labels(
                outcome=result.outcome
            )
            duration.observe(result.duration_ms / 1000)
            if not self.answers:
                self.oldest_answer_mono = time.monotonic()
            self.answers.append(result)
        self.after_each()
        if self.return_when is not None and (not self.in_flight or self.return_when()):
            self.return_when = None  # stop once: later callbacks of this turn find the loop stopping
            self.loop.stop()

    def answers_due(self, *, batch: int) -> bool:
        """Whether the answers make a batch worth recording: `batch` of them, or the oldest has waited long enough."""
        return bool(self.answers) and (
            len(self.answers) >= batch or time.monotonic() - self.oldest_answer_mono >= RECORD_LINGER
        )

    def take_answers(self) -> list[SendResult]:
        """The answers to record, no longer held here. Those that come while they are recorded (the loop runs
        during the record's round trips: runtime.overlap) are the next batch's."""
        answers, self.answers = self.answers, []
        self.taken_oldest_mono = self.oldest_answer_mono
        return answers

    def answers_back(self, answers: list[SendResult]) -> None:
        """Answers whose record failed (the database went away): held again, ahead of any newer, for the next try."""
        if answers:
            if self.answers:
                self.oldest_answer_mono = min(self.oldest_answer_mono, self.taken_oldest_mono)
            else:
                self.oldest_answer_mono = self.taken_oldest_mono
            self.answers = answers + self.answers

    def drain(self, *, timeout: float) -> list[ClaimedDelivery]:
        """Cancel what has not begun, let what has finish (within `timeout`); return the cancelled, to hand back."""
        for task, flight in list(self.in_flight.items()):
            if flight.delivery.id not in self.begun:
                task.cancel()
        if self.in_flight:
            self.loop.run_until_complete(asyncio.wait(list(self.in_flight), timeout=timeout))
        cancelled, self.cancelled = self.cancelled, []
        return cancelled

    def held_ids(self) -> list[uuid.UUID]:
        """The deliveries in hand here: open, cancelled and not yet handed back, or answered and not yet recorded."""
        return [
            *(flight.delivery.id for flight in self.in_flight.values()),
            *(delivery.id for delivery in self.cancelled),
            *(result.delivery.id for result in self.answers),
        ]
