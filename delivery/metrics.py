"""What the scheduler and worker processes measure about themselves, for Prometheus.

Each process keeps its own numbers in memory and serves them on its own port
(`--metrics-port`, see runtime.metrics): they are per process, not in the
database, so they cost the hot path a few microseconds and no query. What the
database says about all processes together is served by the web's /metrics.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from delivery.models import AttemptOutcome
from runtime.models import ProcessKind
from scheduling.zonedata import zone_data_version

ATTEMPT_DURATION = Histogram(
    "birthday_delivery_attempt_duration_seconds",
    "Time from the start of a webhook POST to its outcome, by outcome; _count is the attempts made.",
    labelnames=("outcome",),
    # From a receiver on the same network to WEBHOOK_TIMEOUT (10 s by default).
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
CLAIM_BATCH_DURATION = Histogram(
    "birthday_claim_batch_duration_seconds",
    "Time to claim one batch that found work: due events queued (scheduler), deliveries leased (worker).",
    labelnames=("kind",),
    # From a worker's small claims to a scheduler's whole batch of 1,000 on a table of millions of events.
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
ENDPOINTS_GONE = Counter(
    "birthday_worker_endpoints_gone",
    "Endpoints this worker made GONE: their service answered that the destination no longer exists "
    '(the web\'s birthday_endpoint_state{state="GONE"} says which are gone now).',
)
IN_FLIGHT_LIMIT = Gauge(
    "birthday_worker_in_flight_limit",
    "Requests this worker may keep open to each endpoint now: its adaptive limit (or --concurrency), "
    "within its share of WEBHOOK_MAX_IN_FLIGHT; 0 while the endpoint is failing or paused.",
    labelnames=("endpoint",),
)
LEARNED_RATE = Gauge(
    "birthday_worker_learned_rate",
    "Requests a second this worker starts to each endpoint, as learnt from its 429s without Retry-After "
    "(delivery.rules.limit.LearnedRate); 0 while it has refused nothing.",
    labelnames=("endpoint",),
)
RATE_SLOTS_MISSED = Counter(
    "birthday_worker_rate_slots_missed",
    "Requests not sent with their max-rate slot because they could not begin within its calendar second "
    "(the worker was held up); each took a new slot (delivery.rules.pace).",
    labelnames=("endpoint",),
)
OUTCOMES_UNKNOWN = Counter(
    "birthday_worker_outcomes_unknown",
    "Attempts whose outcome is unknown: the connection was lost after the message was sent and before "
    "the receiver answered (an SMTP relay's reply after the final dot); resent under the same Message-ID "
    "unless the destination gives them up.",
    labelnames=("transport",),
)

# Every series a process can produce exists from its start, at zero: rate() and
# alerts then see a failure's first increase, not a series appearing out of nothing.
# ABANDONED is not among them: a worker that abandons an attempt is dead, and the
# one that logs it did not make it (the web's attempts gauge counts those).
# Kept by outcome: the worker observes one per request, and `labels()` takes a lock and
# builds its key each time it is asked.
ATTEMPT_DURATION_BY_OUTCOME = {
    outcome: ATTEMPT_DURATION.labels(outcome=outcome)
    for outcome in (
        AttemptOutcome.DELIVERED,
        AttemptOutcome.TRANSIENT_FAILURE,
        AttemptOutcome.PERMANENT_FAILURE,
    )
}
for _kind in ProcessKind.values:
    CLAIM_BATCH_DURATION.labels(kind=_kind)
OUTCOMES_UNKNOWN.labels(transport="smtp")


class ZoneDataInfo(Collector):
    """birthday_zone_data_info: the zone data version as of the scrape, the one the process computes with."""

    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily(
            "birthday_zone_data",
            "The IANA version of the time zone database this process computes with.",
            value={"version": zone_data_version()},
        )


REGISTRY.register(ZoneDataInfo())
