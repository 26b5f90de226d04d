"""The delivery worker loop: claim under a lease, send outside any transaction, record.

One thread does everything. The claim, the record and the other database work
are synchronous Django code; between them the thread runs an asyncio event loop
in which every request to the receiver is a coroutine, so ten open requests
or two thousand cost about the same. While the thread talks to PostgreSQL the
loop is paused and the open requests simply wait in their sockets' buffers.

How many requests are open to each receiver is decided per endpoint by a
`Lane`: its adaptive limit (delivery.limit) or an operator's --concurrency,
the fleet's share of WEBHOOK_MAX_IN_FLIGHT, the fleet's WEBHOOK_MAX_RATE
schedule, a Retry-After the receiver asked for, and the endpoint's state
(a failing endpoint gets one probe at a time, a paused one nothing).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import OperationalError
from django.utils import timezone

from delivery.health import Signal, signal_of
from delivery.limit import AdaptiveLimit, FixedLimit
from delivery.metrics import ATTEMPT_DURATION, CLAIM_BATCH_DURATION, IN_FLIGHT_LIMIT
from delivery.models import Endpoint, EndpointState
from delivery.selectors import next_retry_at
from delivery.services.endpoints import (
    endpoint_release_share,
    endpoint_reserve_send_slots,
    endpoint_return_probe,
    endpoint_share_in_flight,
    endpoint_take_probe,
    endpoints_ensure,
)
from delivery.services.expiry import deliveries_expire_late
from delivery.services.leases import deliveries_claim, deliveries_release, deliveries_renew_leases
from delivery.services.record import deliveries_record
from delivery.signing import WebhookSigner, parse_secrets
from delivery.transport import ClaimedDelivery, SendResult, WebhookTransport
from runtime.database import DB_ERRORS, refresh_connection, reset_connection_after_error
from runtime.loop import ProcessLoop, SideTask
from runtime.models import ProcessKind
from runtime.wakeup import WORKER_CHANNEL
from scheduling.zonedata import zone_data_refresh, zone_data_version

logger = logging.getLogger(__name__)

# Results are written in batches; a result waits at most this long to be written.
RECORD_LINGER = 0.05
# After losing the database, a worker takes over nobody's expired leases for
# WEBHOOK_TIMEOUT + this long once it is back. Every lease may have expired
# during an outage longer than a lease, but their workers are alive: they
# reconnect within the back-off cap (2 s, so three caps cover a slow
# reconnect), renew their leases and record what they sent, at the latest
# once the request each is waiting on ends. Taking the leases over first would
# send those messages a second time.
TAKEOVER_GRACE_BEYOND_TIMEOUT = 6.0
# How often the endpoints' shared state is read again (an operator's pause, a
# failing endpoint, a Retry-After another worker was told, the fleet's shares):
# a pause reaches every worker within about this long.
ENDPOINTS_EVERY = 1.0
# How often deliveries still waiting EVENT_MAX_LATENESS after being queued are
# failed (more often when the lateness itself is short).
EXPIRE_EVERY = 60.0
# Under WEBHOOK_MAX_RATE a worker reserves this many seconds of the schedule at a time:
# short, so slots it cannot use (it stops, the backlog ends) cost the fleet little.
RATE_HORIZON = 0.25
# The most the loop runs before the thread looks at leases, heartbeat and endpoints.
LOOP_SLICE = 0.25
# After a claim found less than it asked for, the next waits this long (or a NOTIFY).
EMPTY_CLAIM_PAUSE = 0.2

HEALTHY, FAILING, PAUSED = EndpointState.HEALTHY, EndpointState.FAILING, EndpointState.PAUSED


@dataclass
class Lane:
    """This worker's traffic to one endpoint: what it holds, what is open, what may be."""

    url: str
    endpoint_id: int
    limit: AdaptiveLimit | FixedLimit
    state: str = HEALTHY
    consecutive_failures: int = 0
    next_probe_at: datetime | None = None
    # time.monotonic() before which no request starts (a Retry-After).
    blocked_until: float = 0.0
    # Claimed, not yet started.
    waiting: deque[ClaimedDelivery] = field(default_factory=deque)
    open: int = 0
    probing: bool = False
    # Our part of WEBHOOK_MAX_IN_FLIGHT (None: no fleet cap).
    share: int | None = None
    # time.monotonic() instants reserved under WEBHOOK_MAX_RATE, earliest first.
    slots: deque[float] = field(default_factory=deque)

    def allowed(self) -> int:
        """How many requests may be open now."""
        return self.limit.current if self.share is None else min(self.limit.current, self.share)

    def takes_claims(self, now: float) -> bool:
        return self.state == HEALTHY and now >= self.blocked_until

    def room(self, *, batch_size: int) -> int:
        """How many more deliveries to hold: enough to fill the limit, plus one batch ready behind it."""
        return max(0, self.allowed() + batch_size - self.open - len(self.waiting))


class Worker(ProcessLoop):
    """Sends due deliveries to their receivers at each receiver's pace.

    A live worker renews the leases it holds every third of a lease, so a lease
    only has to outlast one request (WEBHOOK_TIMEOUT + DELIVERY_LEASE_MARGIN),
    however much work waits in this process; a worker that dies is replaced
    that soon.
    """

    kind = ProcessKind.WORKER
    HEARTBEAT_COLUMNS = {"processed": "sent", "succeeded": "delivered", "failed": "dead"}

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        batch_size: int = 200,
        interval: float = 1.0,
        once: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__(interval=interval, once=once, stop=stop, channel=WORKER_CHANNEL)
        self.concurrency = concurrency
        self.batch_size = max(batch_size, 1)
        self.timeout = settings.WEBHOOK_TIMEOUT.total_seconds()
        self.lease = settings.WEBHOOK_TIMEOUT + settings.DELIVERY_LEASE_MARGIN
        self.max_rate = settings.WEBHOOK_MAX_RATE
        self.max_in_flight = settings.WEBHOOK_MAX_IN_FLIGHT
        secrets = parse_secrets(settings.WEBHOOK_SECRET)
        self.transport = WebhookTransport(timeout=self.timeout, signer=WebhookSigner(secrets) if secrets else None)
        self.loop = asyncio.new_event_loop()
        # Set once the loop has been asked to stop and give the thread back (_run_sends).
        self.returning = True
        self.lanes: dict[str, Lane] = {}
        self.tasks: dict[asyncio.Task, tuple[Lane, ClaimedDelivery, int]] = {}
        self.started: set = set()  # ids of deliveries whose request has begun
        self.cancelled: list[ClaimedDelivery] = []
        self.unrecorded: list[SendResult] = []
        self.oldest_unrecorded = 0.0
        # Set while the database is (or just was) away: see TAKEOVER_GRACE_BEYOND_TIMEOUT.
        self.recovering = False
        self.take_over_after = 0.0
        # When the loop last moved on from one step to the next (see _held_up).
        self.progress_at = 0.0
        self.last_endpoints = self.next_claim_at = float("-inf")
        self.renew_leases = SideTask("lease renewal", max(0.5, self.lease.total_seconds() / 3), self._renew_leases)
        self.side_tasks += [
            self.renew_leases,
            SideTask(
                "expiry of late deliveries",
                min(EXPIRE_EVERY, settings.EVENT_MAX_LATENESS.total_seconds() / 4),
                self._expire_late,
            ),
        ]
        # Both are first due an interval after the start, like the heartbeat after heartbeat(start=True).
        for task in self.side_tasks:
            task.last = time.monotonic()

    def reported_zone_data(self) -> str:
        # The worker computes nothing with zones itself, but the version it
        # reports follows an upgrade of its host's zone data like the scheduler's.
        zone_data_refresh()
        return zone_data_version()

    def database_lost(self) -> None:
        self.recovering = True
        self.take_over_after = time.monotonic() + self.timeout + TAKEOVER_GRACE_BEYOND_TIMEOUT

    # --- the loop ---------------------------------------------------------------

    def run(self) -> int:
        logger.info(
            "Worker started",
            extra={
                "worker": self.name,
                "concurrency": self.concurrency or "adaptive",
                "batch_size": self.batch_size,
                "max_rate": self.max_rate or None,
                "max_in_flight": self.max_in_flight or None,
                "zone_data": zone_data_version(),
            },
        )
        self.heartbeat(start=True)
        self.loop.run_until_complete(self.transport.open())
        self.progress_at = time.monotonic()
        try:
            while not self.stop.is_set():
                self._held_up()
                if self._refresh_endpoints() is None:
                    continue
                found = self._claim_more()
                self._dispatch(may_reserve=True)
                if self.tasks:
                    self._run_sends(LOOP_SLICE)
                elif self._waiting():
                    self.stop.wait(min(LOOP_SLICE, max(0.01, self._until_sendable())))
                self._record_if_ready()
                self.run_side_tasks()
                if self._waiting() or self.tasks or self.unrecorded or found is None or found > 0:
                    continue  # busy, or did not look for work this round
                if self.once:
                    break
                self.listener.wait(self._idle_wait())
                self.progress_at = time.monotonic()  # sleeping is not being held up
                self.next_claim_at = float("-inf")
        finally:
            self._drain()
            self.loop.run_until_complete(self.transport.close())
            self.loop.close()
        return 0

    # --- endpoints --------------------------------------------------------------

    def _lane(self, url: str, endpoint: Endpoint | None = None) -> Lane:
        lane = self.lanes.get(url)
        if lane is None:
            endpoint = endpoint or endpoints_ensure(urls=[url])[url]
            limit = FixedLimit(self.concurrency) if self.concurrency else AdaptiveLimit()
            lane = self.lanes[url] = Lane(url=url, endpoint_id=endpoint.pk, limit=limit)
            self._apply_state(lane, endpoint)
        return lane

    def _refresh_endpoints(self) -> bool | None:
        """Read every endpoint's shared state once a second; None if the database is away."""
        now = time.monotonic()
        if now - self.last_endpoints < ENDPOINTS_EVERY:
            return True
        try:
            refresh_connection()
            if not self.lanes:
                self._lane(settings.WEBHOOK_URL)
            for endpoint in Endpoint.objects.all():
                self._apply_state(self._lane(endpoint.url, endpoint), endpoint)
            if self.max_in_flight:
                for lane in self.lanes.values():
                    want = lane.limit.current if (lane.waiting or lane.open or lane.state == HEALTHY) else 0
                    lane.share = endpoint_share_in_flight(
                        endpoint_id=lane.endpoint_id, worker=self.name, want=want, holding=lane.open,
                        cap=self.max_in_flight,
                        lease=self.lease, now=timezone.now(),
                    )
            self.last_endpoints = now
            for lane in self.lanes.values():
                IN_FLIGHT_LIMIT.labels(endpoint=lane.url).set(lane.allowed() if lane.state == HEALTHY else 0)
            return True
        except DB_ERRORS as exc:
            self.database_unavailable("read endpoints", exc)
            return None

    def _apply_state(self, lane: Lane, endpoint: Endpoint) -> None:
        lane.state = endpoint.state
        lane.consecutive_failures = endpoint.consecutive_failures
        lane.next_probe_at = endpoint.next_probe_at
        if endpoint.blocked_until is not None:
            remaining = (endpoint.blocked_until - timezone.now()).total_seconds()
            lane.blocked_until = max(lane.blocked_until, time.monotonic() + remaining)
        if lane.state != HEALTHY and lane.waiting:
            # Failing or paused: what this worker holds unsent goes back to the
            # queue, where it waits with the rest in its due order.
            held = list(lane.waiting)
            lane.waiting.clear()
            self._release(held)

    # --- claiming ---------------------------------------------------------------

    def _claim_more(self) -> int | None:
        """Top up the lanes that take deliveries, or take a failing endpoint's probe. Returns how many were claimed."""
        now = time.monotonic()
        if now < self.next_claim_at or self.stop.is_set():
            return 0
        claimed = self._claim_probes()
        if claimed is None:
            return None
        open_lanes = [lane for lane in self.lanes.values() if lane.takes_claims(now)]
        if not open_lanes:
            return claimed
        room = sum(lane.room(batch_size=self.batch_size) for lane in open_lanes)
        held = any(lane.waiting or lane.open for lane in self.lanes.values())
        # Claim in batches (a claim's fixed cost is shared by every row it
        # takes, so many at a time cost far less per row than one at a time),
        # but do not wait for the whole batch to finish before claiming more.
        if room < max(1, self.batch_size // 2) and held:
            return claimed
        want = min(room, self.batch_size)
        closed = [url for url, lane in self.lanes.items() if not lane.takes_claims(now)]
        deliveries = self._claim(limit=want, skip_urls=closed)
        if deliveries is None:
            return None
        for delivery in deliveries:
            self._lane(delivery.endpoint_url).waiting.append(delivery)
        if len(deliveries) < want:
            self.next_claim_at = time.monotonic() + EMPTY_CLAIM_PAUSE
        return claimed + len(deliveries)

    def _claim_probes(self) -> int | None:
        claimed = 0
        for lane in self.lanes.values():
            if lane.state != FAILING or lane.probing or lane.next_probe_at is None or lane.next_probe_at > timezone.now():
                continue
            try:
                if not endpoint_take_probe(endpoint_id=lane.endpoint_id, now=timezone.now(), lease=self.lease):
                    continue
            except DB_ERRORS as exc:
                self.database_unavailable("take a probe", exc)
                return None
            deliveries = self._claim(limit=1, probe_url=lane.url)
            if deliveries is None:
                return None
            if not deliveries:
                endpoint_return_probe(endpoint_id=lane.endpoint_id, now=timezone.now())
                continue
            logger.info("Probing failing endpoint", extra={"worker": self.name, "endpoint": lane.url})
            lane.probing = True
            self._start(lane, deliveries[0], slot=None)
            claimed += 1
        return claimed

    def _claim(self, *, limit: int, skip_urls=(), probe_url: str | None = None) -> list[ClaimedDelivery] | None:
        self._held_up()
        try:
            refresh_connection()
            if self.recovering:
                self._recover()
                if self.recovering:
                    return None
            started = time.perf_counter()
            claimed = deliveries_claim(
                worker=self.name,
                limit=limit,
                lease=self.lease,
                take_over_expired=time.monotonic() >= self.take_over_after,
                skip_urls=skip_urls,
                probe_url=probe_url,
            )
            if claimed:  # only batches that found work: an idle worker's empty polls would drown them
                CLAIM_BATCH_DURATION.labels(kind=ProcessKind.WORKER).observe(time.perf_counter() - started)
            self.backoff.reset()
            return claimed
        except DB_ERRORS as exc:
            self.database_unavailable("claim", exc)
            return None

    def _held_up(self) -> None:
        """A step that held the thread past a lease renewal without an error was an outage too.

        Behind PgBouncer a statement sent while PostgreSQL is away may wait for
        a server connection instead of failing (its query_wait_timeout): the
        worker sees a slow step, not an outage, while the workers that did see
        one are in their back-off, their leases expiring. Taking those over now
        would send their messages again, so the same grace applies as after an
        error. Its own leases were not renewed either: _recover renews them.
        """
        now = time.monotonic()
        held = now - self.progress_at
        self.progress_at = now
        if held > self.renew_leases.every and not self.recovering:
            logger.warning(
                "A database step held the worker %.1f s: taking over no lease until its grace has passed",
                held,
                extra={"worker": self.name},
            )
            self.database_lost()

    def _recover(self) -> None:
        """Back from a database outage: keep what is ours before taking anything new.

        Renew every lease this worker holds and record the outcomes it kept, so
        that no other worker takes those deliveries over and sends them again.
        """
        renewed = deliveries_renew_leases(worker=self.name, ids=[d.id for lane in self.lanes.values() for d in lane.waiting] + [d.id for _, d, _ in self.tasks.values()] + [r.delivery.id for r in self.unrecorded] + [d.id for d in self.cancelled], lease=self.lease)
        self.renew_leases.last = time.monotonic()
        self.heartbeat()
        if self.unrecorded:
            self._record_if_ready(force=True)
            if self.unrecorded:
                return  # still failing; database_unavailable has waited
        self.recovering = False
        logger.info(
            "Database back: renewed %s lease(s), recorded held outcomes",
            renewed,
            extra={"worker": self.name},
        )

    # --- sending ----------------------------------------------------------------

    def _dispatch(self, *, may_reserve: bool) -> None:
        """Start as many waiting deliveries as each lane allows now."""
        now = time.monotonic()
        for lane in self.lanes.values():
            while lane.waiting and lane.open < lane.allowed() and lane.takes_claims(now):
                slot = None
                if self.max_rate:
                    if not lane.slots and not (may_reserve and self._reserve_slots(lane)):
                        break
                    slot = lane.slots.popleft()
                self._start(lane, lane.waiting.popleft(), slot=slot)

    def _reserve_slots(self, lane: Lane) -> bool:
        count = max(1, min(len(lane.waiting), lane.allowed() - lane.open, math.ceil(self.max_rate * RATE_HORIZON)))
        try:
            now = timezone.now()
            first = endpoint_reserve_send_slots(endpoint_id=lane.endpoint_id, count=count, rate=self.max_rate, now=now)
        except DB_ERRORS as exc:
            logger.warning("Send slots not reserved", extra={"worker": self.name, "error": str(exc).strip()})
            reset_connection_after_error()
            return False
        start = time.monotonic() + (first - now).total_seconds()
        lane.slots.extend(start + i / self.max_rate for i in range(count))
        return True

    def _start(self, lane: Lane, delivery: ClaimedDelivery, *, slot: float | None) -> None:
        lane.open += 1
        task = self.loop.create_task(self._send(delivery, slot))
        self.tasks[task] = (lane, delivery, lane.open)
        task.add_done_callback(self._finished)

    async def _send(self, delivery: ClaimedDelivery, slot: float | None) -> SendResult:
        if slot is not None:
            await asyncio.sleep(slot - time.monotonic())
        self.started.add(delivery.id)
        return await self.transport.send(delivery)

    def _finished(self, task: asyncio.Task) -> None:
        lane, delivery, in_flight = self.tasks.pop(task)
        lane.open -= 1
        self.started.discard(delivery.id)
        if delivery.probe:
            lane.probing = False
        if task.cancelled():
            self.cancelled.append(delivery)
            return
        result = task.result()
        signal = signal_of(outcome=result.outcome, status_code=result.status_code, retry_after=result.retry_after)
        lane.limit.on_sample(
            started=result.started,
            finished=time.monotonic(),
            dropped=signal in (Signal.FAILURE, Signal.THROTTLE),
            in_flight=in_flight,
        )
        if signal == Signal.THROTTLE and result.retry_after is not None:
            # Every worker learns it from the endpoint's row once this is recorded; this one stops now.
            wait = min(result.retry_after, settings.DELIVERY_RETRY_MAX.total_seconds())
            lane.blocked_until = max(lane.blocked_until, time.monotonic() + wait)
        ATTEMPT_DURATION.labels(outcome=result.outcome).observe(result.duration_ms / 1000)
        if not self.unrecorded:
            self.oldest_unrecorded = time.monotonic()
        self.unrecorded.append(result)
        self._dispatch(may_reserve=False)
        if not self.returning and (not self.tasks or self.stop.is_set() or self._worth_returning()):
            self.returning = True
            self.loop.stop()

    def _run_sends(self, timeout: float) -> None:
        """Run the loop until there is something to record or room to claim, or `timeout` passes.

        Each finished send asks `_worth_returning` itself (in `_finished`) and
        stops the loop then: one check per send, no wake-up task per send.
        """
        if self._worth_returning():
            return
        self.returning = False
        deadline = self.loop.call_later(timeout, self.loop.stop)
        try:
            self.loop.run_forever()
        finally:
            deadline.cancel()
            self.returning = True  # the loop may next run for other reasons (the drain): never stop it then

    def _worth_returning(self) -> bool:
        if self.unrecorded and (
            len(self.unrecorded) >= max(1, self.batch_size // 2)
            or time.monotonic() - self.oldest_unrecorded >= RECORD_LINGER
        ):
            return True
        now = time.monotonic()
        if now < self.next_claim_at:
            return False
        room = sum(lane.room(batch_size=self.batch_size) for lane in self.lanes.values() if lane.takes_claims(now))
        return room >= max(1, self.batch_size // 2) and not any(lane.waiting for lane in self.lanes.values())

    def _waiting(self) -> bool:
        return any(lane.waiting for lane in self.lanes.values())

    def _until_sendable(self) -> float:
        now = time.monotonic()
        return min((lane.blocked_until - now for lane in self.lanes.values() if lane.waiting), default=0.0)

    # --- recording --------------------------------------------------------------

    def _record_if_ready(self, *, force: bool = False) -> None:
        if not self.unrecorded:
            return
        ready = (
            force
            or not self.tasks
            or len(self.unrecorded) >= max(1, self.batch_size // 2)
            or time.monotonic() - self.oldest_unrecorded >= RECORD_LINGER
        )
        if not ready:
            return
        healthy = [
            url for url, lane in self.lanes.items() if lane.state == HEALTHY and lane.consecutive_failures == 0
        ]
        try:
            refresh_connection()
            summary = deliveries_record(worker=self.name, results=self.unrecorded, healthy=healthy)
            self.backoff.reset()
        except DB_ERRORS as exc:
            # Keep the results and write them once the database is back; if the
            # lease runs out first, another worker resends with the same key.
            self.database_unavailable("record", exc)
            return
        for url, health in summary.verdicts.items():
            lane = self.lanes[url]
            lane.state, lane.consecutive_failures, lane.next_probe_at = (
                health.state, health.consecutive_failures, health.next_probe_at
            )
            if lane.state != HEALTHY:
                self.last_endpoints = float("-inf")  # hand back what waits, at once
        self.count(sent=len(self.unrecorded), delivered=summary.delivered, dead=summary.dead)
        self.unrecorded = []

    def _release(self, deliveries: list[ClaimedDelivery]) -> None:
        if not deliveries:
            return
        released = deliveries_release(worker=self.name, claimed=deliveries)
        logger.info("Handed back %s unstarted deliveries", released, extra={"worker": self.name})

    def _renew_leases(self, *, idle: float) -> None:
        """Every third of a lease: the leases of what this worker holds outlast the request each waits on."""
        deliveries_renew_leases(worker=self.name, ids=[d.id for lane in self.lanes.values() for d in lane.waiting] + [d.id for _, d, _ in self.tasks.values()] + [r.delivery.id for r in self.unrecorded] + [d.id for d in self.cancelled], lease=self.lease)

    def _expire_late(self, *, idle: float) -> None:
        deliveries_expire_late(now=timezone.now())

    def _idle_wait(self) -> float:
        """Sleep until the next retry is due, never longer than --interval."""
        try:
            next_due = next_retry_at()
        except DB_ERRORS as exc:
            self.database_unavailable("look ahead", exc)
            return 0
        if next_due is None:
            return self.interval
        return min(self.interval, max(0.0, (next_due - timezone.now()).total_seconds()))

    # --- stopping -----------------------------------------------------------------

    def _drain(self) -> None:
        """Let started sends finish, hand back the unstarted, record everything."""
        unstarted = [delivery for lane in self.lanes.values() for delivery in lane.waiting]
        for lane in self.lanes.values():
            lane.waiting.clear()
        for task, (_, delivery, _) in list(self.tasks.items()):
            if delivery.id not in self.started:
                task.cancel()
        if self.tasks:
            logger.info(
                "Waiting for %s in-flight sends to finish", len(self.started), extra={"worker": self.name}
            )
            # Running sends end within the timeout.
            self.loop.run_until_complete(asyncio.wait(list(self.tasks), timeout=self.timeout + 5))
        unstarted += self.cancelled
        self.cancelled = []
        # The database may be briefly away; try for a while before giving up
        # (the leases then recover whatever was not written).
        deadline = time.monotonic() + max(self.timeout, 10)
        while (self.unrecorded or unstarted) and time.monotonic() < deadline:
            try:
                refresh_connection()
                if self.unrecorded:
                    self._record_if_ready(force=True)
                    if self.unrecorded:
                        raise OperationalError("outcomes not yet recorded")
                self._release(unstarted)
                unstarted = []
            except DB_ERRORS:
                reset_connection_after_error()
                time.sleep(0.5)
        if self.max_in_flight:
            try:
                endpoint_release_share(worker=self.name)
            except DB_ERRORS:
                reset_connection_after_error()  # the share's lease runs out by itself
        self.close()
        logger.info("Worker stopped", extra={"worker": self.name, **self.counted})
