"""The bare-SQL workers the `queued` workload measures the product against (issue 36).

    python -m bench.bare_worker reference|floor DSN NAME URL [BATCH] [CONNECTIONS]

One process: async psycopg 3 and one aiohttp session of CONNECTIONS (32) connections. A
claimer takes BATCH (100) QUEUED deliveries at a time with the product's claim shape (a
materialised `SELECT ... ORDER BY next_attempt_at LIMIT ... FOR UPDATE SKIP LOCKED`, then
one UPDATE to SENDING with the lease columns the table's constraint asks for), keeping at
most two batches in hand; CONNECTIONS senders POST each one as the product does (its
stored body, Content-Type, X-Idempotency-Key) to URL (the workload's one receiver: the product
keeps it encrypted, which a bare worker need not read); a completer writes the
answers down a batch at a time. The process exits once a claim finds nothing and every
answer is written. Nothing else: no lease renewal or take-over, no retries, no endpoint
health, no limits.

- `reference`: the completion is one UPDATE to DELIVERED (no attempt row), committed.
- `floor`: the writes the product's guarantees need and nothing more, in one transaction
  per batch: one attempt row per request (COPY), the deliveries' UPDATE to DELIVERED,
  checked against the lease (locked_by and the attempt number), and the conclusion of
  their events: PROCESSING -> COMPLETED for those with no delivery left QUEUED or SENDING.

Prints one JSON line: mode, delivered, seconds, cpu_s (user + system, start-up included),
batches, statements, commits.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import sys
import time
from datetime import UTC, datetime

import aiohttp
import psycopg

CLAIM = """
WITH v AS MATERIALIZED (
    SELECT id AS v_id FROM delivery_delivery WHERE status = 'QUEUED' AND next_attempt_at <= now()
    ORDER BY next_attempt_at LIMIT %s FOR UPDATE SKIP LOCKED)
UPDATE delivery_delivery AS d SET status = 'SENDING', attempts = d.attempts + 1, locked_by = %s,
    locked_until = now() + interval '40 seconds', attempt_started_at = now(), updated_at = now()
FROM v WHERE d.id = v.v_id
RETURNING d.id, d.event_id, d.idempotency_key, d.payload::text, d.attempts"""
DONE_REFERENCE = """
UPDATE delivery_delivery SET status = 'DELIVERED', delivered_at = now(), last_status_code = 200,
    locked_by = '', locked_until = NULL, updated_at = now()
WHERE id = ANY(%s)"""
DONE_FLOOR = """
UPDATE delivery_delivery AS d SET status = 'DELIVERED', delivered_at = now(), next_attempt_at = now(),
    last_status_code = v.code, last_error = '', locked_by = '', locked_until = NULL, updated_at = now()
FROM unnest(%s::uuid[], %s::int[], %s::int[]) AS v(id, attempt, code)
WHERE d.id = v.id AND d.status = 'SENDING' AND d.locked_by = %s AND d.attempts = v.attempt
RETURNING d.event_id"""
CONCLUDE = """
UPDATE scheduling_event AS e SET status = 'COMPLETED', version = e.version + 1, executed_at = now(),
    updated_at = now()
WHERE e.id = ANY(%s) AND e.status = 'PROCESSING'
  AND NOT EXISTS (SELECT 1 FROM delivery_delivery d WHERE d.event_id = e.id AND d.status IN ('QUEUED', 'SENDING'))"""
ATTEMPTS = (
    "COPY delivery_deliveryattempt (delivery_id, number, worker, started_at, finished_at, duration_ms, "
    "outcome, status_code, error, response_excerpt) FROM STDIN"
)


async def main(mode: str, dsn: str, name: str, url: str, batch: int, connections: int) -> dict:
    counts = {"batches": 0, "statements": 0, "commits": 0, "delivered": 0}
    todo: asyncio.Queue = asyncio.Queue()
    answered: list[tuple] = []
    claimed_all = asyncio.Event()
    in_hand = 0

    async def claimer(conn: psycopg.AsyncConnection) -> None:
        nonlocal in_hand
        while True:
            if in_hand >= 2 * batch:  # two batches in hand at most: one sending, one ready behind it
                await asyncio.sleep(0.001)
                continue
            async with conn.transaction():
                rows = await (await conn.execute(CLAIM, [batch, name])).fetchall()
            counts["batches"] += 1
            counts["statements"] += 1
            counts["commits"] += 1
            in_hand += len(rows)
            for row in rows:
                todo.put_nowait(row)
            if len(rows) < batch:
                claimed_all.set()
                for _ in range(connections):
                    todo.put_nowait(None)
                return

    async def sender(session: aiohttp.ClientSession) -> None:
        while (row := await todo.get()) is not None:
            delivery_id, _, key, body, attempt = row
            started = datetime.now(UTC)
            async with session.post(
                url,
                data=body.encode(),
                headers={"Content-Type": "application/json", "X-Idempotency-Key": key},
            ) as r:
                excerpt = (await r.read())[:2048].decode(errors="replace")
                answered.append((delivery_id, attempt, r.status, started, datetime.now(UTC), excerpt))

    async def completer(conn: psycopg.AsyncConnection, senders: asyncio.Future) -> None:
        nonlocal in_hand
        while True:
            finished = senders.done()
            if len(answered) >= batch or (answered and (finished or todo.empty())):
                done, answered[:] = answered[:], []
                async with conn.transaction():
                    if mode == "reference":
                        await conn.execute(DONE_REFERENCE, [[a[0] for a in done]])
                        counts["statements"] += 1
                    else:
                        async with conn.cursor().copy(ATTEMPTS) as copy:
                            for d_id, attempt, code, started, ended, excerpt in done:
                                ms = int((ended - started).total_seconds() * 1000)
                                await copy.write_row(
                                    (d_id, attempt, name, started, ended, ms, "DELIVERED", code, "", excerpt)
                                )
                        events = await (
                            await conn.execute(
                                DONE_FLOOR,
                                [[a[0] for a in done], [a[1] for a in done], [a[2] for a in done], name],
                            )
                        ).fetchall()
                        await conn.execute(CONCLUDE, [[e[0] for e in events]])
                        counts["statements"] += 3
                counts["commits"] += 1
                counts["delivered"] += len(done)
                in_hand -= len(done)
            elif finished:
                return
            else:
                await asyncio.sleep(0.002)

    claim_conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    done_conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as session:
        senders = asyncio.gather(*(sender(session) for _ in range(connections)))
        await asyncio.gather(claimer(claim_conn), completer(done_conn, senders), senders)
    await claim_conn.close()
    await done_conn.close()
    return counts


if __name__ == "__main__":
    mode, dsn, name, url = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    if mode not in ("reference", "floor"):
        raise SystemExit(f"mode: reference or floor, not {mode}")
    batch = int(sys.argv[5]) if len(sys.argv) > 5 else 100
    connections = int(sys.argv[6]) if len(sys.argv) > 6 else 32
    started = time.perf_counter()
    counts = asyncio.run(main(mode, dsn, f"{name}-{os.getpid()}", url, batch, connections))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                "mode": mode,
                **counts,
                "seconds": time.perf_counter() - started,
                "cpu_s": usage.ru_utime + usage.ru_stime,
            }
        )
    )
