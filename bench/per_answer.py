"""The worker's own Python per answer, timed in one checkout without PostgreSQL or a receiver (issue 36).

    cd <checkout> && PYTHONPATH=. .venv/bin/python /path/to/bench/per_answer.py

The `queued` workload times the whole worker, and on the 2-core VM its rate moves by
10-30 % between rounds of the same checkout: a change worth a few microseconds an
answer is below what three rounds can show. This times the pieces such a change
touches, each over a batch of 200 answers from one healthy endpoint (as at a 0 ms
receiver), best of 7 repeats of 50 batches, in microseconds an answer:

- `claimed rows`: a claimed row made into a ClaimedDelivery (delivery.worker.leases);
- `record's decisions`: the record's per-answer Python before its statements
  (delivery.worker.record: the descriptions or answers, the retry decision, the
  AttemptRecord), as this checkout does it;
- `duration metric`: the attempt-duration histogram observed once per answer (delivery.worker.sender).

It imports the checkout's own modules; a checkout from before 713e0df (its `_record`
takes the Answer, not the description) is timed the way that checkout records.
Prints one JSON line.
"""

from __future__ import annotations

import inspect
import json
import os
import timeit
import uuid
from datetime import UTC, datetime, timedelta

BATCH = 200


def main() -> dict:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")  # never connected to
    import django

    django.setup()
    from delivery import metrics
    from delivery.models import AttemptOutcome
    from delivery.receivers.transport import ClaimedDelivery, SendResult
    from delivery.rules.retry import RetryPolicy
    from delivery.worker import record

    now = datetime.now(UTC)
    ids = (uuid.uuid4(), uuid.uuid4())

    def claimed() -> ClaimedDelivery:
        return ClaimedDelivery(
            id=ids[0],
            event_id=ids[1],
            idempotency_key="k" * 24,
            endpoint_key="e" * 40,
            body='{"message": "Hey"}',
            attempt=1,
            max_attempts=8,
            due_at=now,
            queued_at=now,
            probe=False,
        )

    results = [
        SendResult(
            delivery=claimed(),
            outcome=AttemptOutcome.DELIVERED,
            started_at=now,
            finished_at=now,
            duration_ms=1,
            status_code=200,
            response_excerpt="ok",
        )
        for _ in range(BATCH)
    ]
    policy, lateness = RetryPolicy.from_settings(), timedelta(hours=1)

    def claim_rows() -> None:
        for _ in range(BATCH):
            claimed()

    if "description" in inspect.signature(record._record).parameters:

        def decisions() -> None:
            descriptions = {id(r): r.describe() for r in results}
            for r in results:
                record._record(r, "w", descriptions[id(r)], None, None, policy, lateness)

    else:  # before 713e0df: an Answer for every answer, described twice

        def decisions() -> None:
            answers = {id(r): record._answer(r) for r in results}
            for r in results:
                record._record(r, "w", answers[id(r)], None, policy, lateness)

    by_outcome = getattr(metrics, "ATTEMPT_DURATION_BY_OUTCOME", None)

    def duration_metric() -> None:
        for r in results:
            if by_outcome is not None:
                by_outcome[r.outcome].observe(r.duration_ms / 1000)
            else:
                metrics.ATTEMPT_DURATION.labels(outcome=r.outcome).observe(r.duration_ms / 1000)

    timed = {}
    for name, work in (
        ("claimed rows", claim_rows),
        ("record's decisions", decisions),
        ("duration metric", duration_metric),
    ):
        best = min(timeit.repeat(work, number=50, repeat=7))
        timed[name] = round(best / 50 / BATCH * 1e6, 2)
    return timed


if __name__ == "__main__":
    print(json.dumps(main()))
