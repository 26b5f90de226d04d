"""The worker's requests in flight: an asyncio event loop run in slices by the worker's one thread.

The execution half of the worker, as Oban keeps its executor apart from its
producer. Every request to a receiver is a coroutine on one event loop, so ten
open requests or two thousand cost about the same. The worker's thread runs
the loop for a slice, then leaves it to claim, record and talk to PostgreSQL;
meanwhile the open requests simply wait in their sockets' buffers.

What may start is delivery.lanes' decision; this module starts it, keeps the
answers until the worker records them, and stops the loop as soon as the
worker has something worth doing: answers to record, room to claim into.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from delivery.lanes import Lane
from delivery.metrics import ATTEMPT_DURATION
from delivery.transport import ClaimedDelivery, SendResult, WebhookTransport

# Answers are recorded in batches; an answer waits at most this long to be recorded.
RECORD_LINGER = 0.05


@dataclass(frozen=True)
class InFlight:
    """A request started and not yet finished."""

    lane: Lane
    delivery: ClaimedDelivery
    # Requests open to the lane when it started, itself included: the adaptive limit's sample.
    open_at_start: int


class Sender:
    """Starts requests on the event loop and collects their answers.

    `after_each` runs after every finished request, inside the loop (the
    worker starts what the freed room allows, without database work).
    """

    def __init__(self, *, transport: WebhookTransport, after_each: Callable[[], None]) -> None:
        self.transport = transport
        self.after_each = after_each
        self.loop = asyncio.new_event_loop()
        self.in_flight: dict[asyncio.Task, InFlight] = {}
        # Deliveries whose request has begun (a rate slot's wait is over).
        self.begun: set[uuid.UUID] = set()
        # Answers not yet recorded, and when the oldest of them came.
        self.answers: list[SendResult] = []
        self.oldest_answer_mono = 0.0
        # Started, then cancelled before their request began (a drain): still ours to hand back.
        self.cancelled: list[ClaimedDelivery] = []
        # While `run` runs the loop: what says it is time to give the thread back. None otherwise.
        self.return_when: Callable[[], bool] | None = None

    def open(self) -> None:
        self.loop.run_until_complete(self.transport.open())

    def close(self) -> None:
        self.loop.run_until_complete(self.transport.close())
        self.loop.close()

    @property
    def busy(self) -> bool:
        return bool(self.in_flight)

    def start(self, lane: Lane, delivery: ClaimedDelivery, *, slot_mono: float | None) -> None:
        """Start sending `delivery` (at `slot_mono` if it has a rate slot, then at its turn at the lane's learned
        rate); it counts as open to its lane at once."""
        lane.open += 1
        lane.not_begun += 1
        if delivery.probe:
            lane.probing = True
        task = self.loop.create_task(self._send(lane, delivery, slot_mono))
        self.in_flight[task] = InFlight(lane=lane, delivery=delivery, open_at_start=lane.open)
        task.add_done_callback(self._finished)

    async def _send(
        self, lane: Lane, delivery: ClaimedDelivery, slot_mono: float | None
    ) -> tuple[SendResult, bool]:
        """The answer, and whether the request waited for its turn at the learned rate (the rate held it back)."""
        if slot_mono is not None:
            await asyncio.sleep(slot_mono - time.monotonic())
        waited_for_turn = False
        # Asked again after each wait: a cut meanwhile makes the turn later.
        while (wait := lane.turn_in(time.monotonic())) > 0:
            waited_for_turn = True
            await asyncio.sleep(wait)
        lane.take_turn(time.monotonic())
        lane.not_begun -= 1
        self.begun.add(delivery.id)
        # Signed and timed as the lane's destination says (delivery.lanes follows its edits).
        return await self.transport.send(
            delivery, url=lane.url, signer=lane.signer, timeout=lane.timeout
        ), waited_for_turn

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
        flight.lane.open -= 1
        if flight.delivery.probe:
            flight.lane.probing = False
        if task.cancelled():
            if flight.delivery.id not in self.begun:
                flight.lane.not_begun -= 1
            self.begun.discard(flight.delivery.id)
            self.cancelled.append(flight.delivery)
            return
        self.begun.discard(flight.delivery.id)
        result, waited_for_turn = task.result()
        flight.lane.learn_from(
            result,
            open_at_start=flight.open_at_start,
            finished_mono=time.monotonic(),
            waited_for_turn=waited_for_turn,
        )
        ATTEMPT_DURATION.labels(outcome=result.outcome).observe(result.duration_ms / 1000)
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

    def answers_recorded(self) -> None:
        self.answers = []

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
