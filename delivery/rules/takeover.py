"""When a worker may take over other workers' expired leases: not for a grace after it lost the database.

Every lease may have expired during an outage longer than a lease, but their
workers are alive: they reconnect within the back-off cap (2 s, so three caps
cover a slow reconnect), renew their leases and record what they sent, at the
latest once the request each is waiting on ends. Taking the leases over first
would send those messages a second time. So a worker back from an outage
takes over nobody's expired leases for WEBHOOK_TIMEOUT + TAKEOVER_GRACE_BEYOND_TIMEOUT,
and keeps what it holds itself (renews its leases, records its answers) before
it takes anything new.

A step that held the thread past a lease renewal without an error was an
outage too. Behind PgBouncer a statement sent while PostgreSQL is away may wait
for a server connection instead of failing (its query_wait_timeout): the worker
sees a slow step, not an outage, while the workers that did see one are in
their back-off, their leases expiring.
"""

from __future__ import annotations

TAKEOVER_GRACE_BEYOND_TIMEOUT = 6.0


class TakeoverGrace:
    """The grace after an outage: one deadline, and whether this worker has kept what it holds since.

    Every method takes the caller's time.monotonic(), so a table of instants tests it.
    """

    def __init__(self, *, timeout: float, held_up_after: float, now_mono: float) -> None:
        self.grace = timeout + TAKEOVER_GRACE_BEYOND_TIMEOUT
        self.held_up_after = held_up_after
        # No expired lease is taken over before this instant.
        self.until_mono = float("-inf")
        # Lost the database since this worker last kept what it holds.
        self.recovery_due = False
        # When the loop last moved on from one step to the next.
        self.stepped_mono = now_mono

    def lost(self, now_mono: float) -> None:
        """The database was away (or as good as): the grace starts again from now."""
        self.until_mono = now_mono + self.grace
        self.recovery_due = True

    def stepped(self, now_mono: float) -> float | None:
        """A step ended; if it held the thread past `held_up_after`, that was an outage: return how long it held."""
        held, self.stepped_mono = now_mono - self.stepped_mono, now_mono
        if held <= self.held_up_after or self.recovery_due:
            return None
        self.lost(now_mono)
        return held

    def rested(self, now_mono: float) -> None:
        """The loop slept on purpose: sleeping is not being held up."""
        self.stepped_mono = now_mono

    def recovered(self) -> None:
        """This worker renewed its leases and recorded its answers; the deadline still runs for the others'."""
        self.recovery_due = False

    def may_take_over(self, now_mono: float) -> bool:
        return now_mono >= self.until_mono
