"""SQL that builds the benchmark's data directly (fast, and independent of the code under test)."""

from __future__ import annotations

import time

import psycopg

# The destinations too: each workload's receiver has its own URL, and WEBHOOK_URL seeds the
# default destination only while none exists.
TRUNCATE = """
TRUNCATE users_user, scheduling_event, delivery_delivery, delivery_deliveryattempt,
         runtime_processheartbeat, delivery_destination CASCADE
"""

# One user per i; born on today's date some years ago (Feb 29 folds to Feb 28).
USERS = """
INSERT INTO users_user (id, first_name, last_name, date_of_birth, timezone, created_at, updated_at)
SELECT {uid}, 'First' || i, 'Last' || i,
       ((now() AT TIME ZONE 'UTC')::date - make_interval(years => 20 + mod(i, 40)))::date,
       'UTC', now(), now()
FROM generate_series(%(lo)s::int, %(hi)s::int) AS i
"""

# Deterministic UUIDs from (tag, i): the run's rows can be joined back without a lookup.
UID = "md5(%(tag)s || ':' || i)::uuid"
EID = "md5(%(tag)s || ':e:' || i)::uuid"

# One PENDING event per user, target given per i by an SQL expression.
EVENTS = """
INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
    target_timestamp_local, target_timezone, executed_at, failure_reason, version,
    idempotency_key, created_at, updated_at)
SELECT {eid}, {uid}, 'BIRTHDAY', %(status)s, (t AT TIME ZONE 'UTC')::date, t,
       to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || '+00:00', 'UTC', NULL, '', 1,
       'bench-' || substr(md5(%(tag)s || ':k:' || i), 1, 24), now(), now()
FROM (SELECT i, {target} AS t FROM generate_series(%(lo)s::int, %(hi)s::int) AS i) s
"""

PAYLOAD = """jsonb_build_object(
    'message', 'Hey, First' || i || ' Last' || i || ' it''s your birthday',
    'event_id', {eid}::text, 'event_type', 'BIRTHDAY', 'user_id', {uid}::text,
    'occurrence_date', (now() AT TIME ZONE 'UTC')::date::text,
    'target_timestamp_utc', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || '+00:00')"""

# For the endurance run: events already PROCESSING with a QUEUED delivery each.
DELIVERIES = """
INSERT INTO delivery_delivery (id, event_id, idempotency_key, endpoint_key, payload, status, attempts,
    max_attempts, next_attempt_at, locked_until, locked_by, attempt_started_at, last_status_code,
    last_error, delivered_at, created_at, updated_at)
SELECT md5(%(tag)s || ':d:' || i)::uuid, {eid}, 'bench-' || substr(md5(%(tag)s || ':k:' || i), 1, 24),
       %(key)s, {payload}, 'QUEUED', 0, 8, now(), NULL, '', NULL, NULL, '', NULL, now(), now()
FROM generate_series(%(lo)s::int, %(hi)s::int) AS i
"""


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def fmt(sql: str) -> str:
    uid = UID
    eid = EID
    return sql.format(uid=uid, eid=eid, target="{target}", payload=PAYLOAD.format(uid=uid, eid=eid))


def users_and_events(
    conn, *, tag: str, n: int, target_sql: str, status: str = "PENDING", chunk: int = 200_000, params=None
) -> None:
    """n users with one event each; `target_sql` is an SQL expression of i (and params)."""
    for lo in range(1, n + 1, chunk):
        hi = min(n, lo + chunk - 1)
        args = {"tag": tag, "lo": lo, "hi": hi, "status": status, **(params or {})}
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")  # bulk load: skip FK triggers
            conn.execute(fmt(USERS), args)
            conn.execute(fmt(EVENTS).format(target=target_sql), args)


def deliveries(conn, *, tag: str, n: int, key: str, chunk: int = 200_000) -> None:
    """n QUEUED deliveries to the endpoint of `key` (Harness.receiver_key: the product's key of its URL)."""
    for lo in range(1, n + 1, chunk):
        hi = min(n, lo + chunk - 1)
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(fmt(DELIVERIES), {"tag": tag, "lo": lo, "hi": hi, "key": key})


def destinations(conn, *, columns: list[dict[str, str]]) -> None:
    """One destination per URL, as an operator would make it with every default: subscribed to every
    event type (no list), standard format, enabled, no max rate, max in flight or timeout of its own,
    no signing secret (the burst's default destination, seeded from WEBHOOK_URL without WEBHOOK_SECRET, has none).
    `columns`: each URL as the product stores it (Harness.receiver_columns); the workers make the endpoints."""
    with conn.transaction():
        for i, stored in enumerate(columns, start=1):
            conn.execute(
                """INSERT INTO delivery_destination (name, url_ciphertext, url_key, url_display, event_types, format,
                       enabled, created_by, updated_by, created_at, updated_at, version)
                   VALUES (%(name)s, %(url_ciphertext)s, %(url_key)s, %(url_display)s, '{}', 'standard', true,
                       'bench', 'bench', now(), now(), 1)""",
                {"name": f"bench-{i}", **stored},
            )


# A bad week's causes, in turn (delivery.rules.failure_causes): what the failures page groups by.
RECENT_FAILURES = [
    (400, "Bad Request"),
    (404, "Not Found"),
    (410, "Gone"),
    (None, "Timed out after 10 s"),
    (None, "Connection error: Cannot connect to host"),
    (
        503,
        "Not delivered within EVENT_MAX_LATENESS (48 h) of being queued: the receiver was failing; last: HTTP 503",
    ),
]


# The three destinations of recent_failures, whose URLs Harness.receiver_columns stores as the product does.
RECENT_FAILURE_URLS = [f"https://bench-{name}.example.org/hook" for name in ("crm", "chat", "broken")]


def recent_failures(
    conn, *, dead: int, delivered: int, columns: dict[str, dict[str, str]], days: int = 7
) -> None:
    """A bad week on top of the history: `dead` of its DEAD deliveries moved into the last `days` days and
    `delivered` DELIVERED ones into the last day, spread over three destinations (made here) and
    RECENT_FAILURES' causes, so the failures page and the destinations' health have groups to count.
    `columns`: Harness.receiver_columns(*RECENT_FAILURE_URLS)."""
    destinations(conn, columns=[columns[url] for url in RECENT_FAILURE_URLS])
    ids = [
        row[0]
        for row in conn.execute("SELECT id FROM delivery_destination WHERE name LIKE 'bench-%%' ORDER BY id")
    ]
    causes = "ARRAY[" + ", ".join(f"{code if code else 'NULL'}::int" for code, _ in RECENT_FAILURES) + "]"
    errors = (
        "ARRAY["
        + ", ".join("'" + error.replace("'", "''") + "'" for _, error in RECENT_FAILURES)
        + "]::text[]"
    )
    with conn.transaction():
        conn.execute(
            f"""
            UPDATE delivery_delivery d
            SET destination_id = (%(ids)s::int[])[1 + mod(n, 3)],
                updated_at = now() - make_interval(secs => mod(n * 7919, %(days)s * 86400)),
                last_status_code = ({causes})[1 + mod(n, {len(RECENT_FAILURES)})],
                last_error = ({errors})[1 + mod(n, {len(RECENT_FAILURES)})]
            FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM delivery_delivery
                  WHERE status = 'DEAD' ORDER BY id LIMIT %(dead)s) picked
            WHERE d.id = picked.id""",
            {"ids": ids, "days": days, "dead": dead},
        )
        conn.execute(
            """
            UPDATE delivery_delivery d
            SET destination_id = (%(ids)s::int[])[1 + mod(n, 2)],
                updated_at = now() - make_interval(secs => mod(n * 7919, 86400)),
                delivered_at = now() - make_interval(secs => mod(n * 7919, 86400))
            FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM delivery_delivery
                  WHERE status = 'DELIVERED' ORDER BY id LIMIT %(delivered)s) picked
            WHERE d.id = picked.id""",
            {"ids": ids, "delivered": delivered},
        )
        for url in RECENT_FAILURE_URLS[:2]:
            stored = columns[url]
            conn.execute(
                "INSERT INTO delivery_endpoint (key, url_ciphertext, url_display, state, consecutive_failures, "
                "last_success_at, last_error, paused_by, updated_at) VALUES (%s, %s, %s, 'HEALTHY', 0, "
                "now() - interval '1 minute', '', '', now())",
                [stored["url_key"], stored["url_ciphertext"], stored["url_display"]],
            )


def pending_keys(conn) -> dict[str, float]:
    """Idempotency keys of PENDING events and their target as epoch seconds."""
    rows = conn.execute(
        "SELECT idempotency_key, extract(epoch FROM target_timestamp_utc) FROM scheduling_event WHERE status = 'PENDING'"
    ).fetchall()
    return {k: float(t) for k, t in rows}


def _iso_utc(timestamp_sql: str) -> str:
    """SQL for a timestamptz as the product's target_timestamp_local text in UTC ("2026-11-24T09:00:00+00:00")."""
    return f"to_char(({timestamp_sql}) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS') || '+00:00'"


# Sequential UUIDs keep the bulk load append-only (random keys would only make the build slower).
def _seq_uuid(kind: str, n: str) -> str:
    return f"('00000000-0000-4000-{kind}-' || lpad(to_hex({n}), 12, '0'))::uuid"


def _numbered_users(conn, args: dict) -> None:
    """Users numbered %(lo)s to %(hi)s (First<i> Last<i>), in the caller's transaction, without triggers."""
    conn.execute("SET LOCAL session_replication_role = replica")
    conn.execute(
        f"""
        INSERT INTO users_user (id, first_name, last_name, date_of_birth, timezone, created_at, updated_at)
        SELECT {_seq_uuid("8000", "i")}, 'First' || i, 'Last' || i, date '1960-01-01' + mod(i, 15000), 'UTC', now(), now()
        FROM generate_series(%(lo)s::int, %(hi)s::int) i""",
        args,
    )


def yearly_history(
    conn,
    *,
    users: int,
    due: int,
    first_year: int = 1,
    failed_every: int = 0,
    deliveries: bool = False,
    chunk: int = 100_000,
) -> None:
    """`users` users, each with nine past yearly occurrences handled and one PENDING.

    The handled ones are `first_year` to `first_year` + 8 years back (minus up to 299
    days), COMPLETED, or FAILED for every `failed_every`-th; with `deliveries`, each
    has its delivery (DELIVERED, or DEAD) and one attempt. The first `due` users'
    PENDING events are due (within the last hour), the rest later this year.
    """
    uid = _seq_uuid("8000", "i")
    status = (
        f"CASE WHEN mod(i + y, {failed_every}) = 0 THEN 'FAILED' ELSE 'COMPLETED' END"
        if failed_every
        else "'COMPLETED'"
    )
    history = f"""
        FROM generate_series(%(lo)s::int, %(hi)s::int) i, generate_series(1, 9) y,
             LATERAL (SELECT (current_date - make_interval(years => y + {first_year - 1}))::date - mod(i, 300) AS d,
                             {status} AS status) dd"""
    for lo in range(1, users + 1, chunk):
        hi = min(users, lo + chunk - 1)
        args = {"lo": lo, "hi": hi, "due": due}
        with conn.transaction():
            _numbered_users(conn, args)
            conn.execute(
                f"""
                INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
                    target_timestamp_local, target_timezone, executed_at, failure_reason, version,
                    idempotency_key, created_at, updated_at)
                SELECT {_seq_uuid("9000", "i * 16 + y")}, {uid}, 'BIRTHDAY',
                    status, d, d + time '09:00', to_char(d, 'YYYY-MM-DD') || 'T09:00:00+00:00', 'UTC',
                    d + time '09:00:01', '', 3, 'h-' || lpad(to_hex(i * 16 + y), 20, '0'),
                    now(), now()
                {history}""",
                args,
            )
            if deliveries:
                conn.execute(
                    f"""
                    INSERT INTO delivery_delivery (id, event_id, idempotency_key, endpoint_key, payload, status, attempts,
                        max_attempts, next_attempt_at, locked_until, locked_by, attempt_started_at, last_status_code,
                        last_error, delivered_at, created_at, updated_at)
                    SELECT {_seq_uuid("b000", "i * 16 + y")}, {_seq_uuid("9000", "i * 16 + y")},
                        'h-' || lpad(to_hex(i * 16 + y), 20, '0'), 'history',
                        jsonb_build_object('message', 'Hey, First' || i || ' Last' || i || ' it''s your birthday',
                                           'event_type', 'BIRTHDAY', 'occurrence_date', d::text),
                        CASE status WHEN 'FAILED' THEN 'DEAD' ELSE 'DELIVERED' END, 1, 8, d + time '09:00', NULL, '',
                        NULL, CASE status WHEN 'FAILED' THEN 400 ELSE 200 END, '',
                        CASE status WHEN 'FAILED' THEN NULL ELSE d + time '09:00:01' END, d + time '09:00', d + time '09:00:01'
                    {history}""",
                    args,
                )
                conn.execute(
                    f"""
                    INSERT INTO delivery_deliveryattempt (delivery_id, number, worker, started_at, finished_at, duration_ms,
                        outcome, status_code, error, response_excerpt)
                    SELECT {_seq_uuid("b000", "i * 16 + y")}, 1, 'bench', d + time '09:00', d + time '09:00:01', 12,
                        CASE status WHEN 'FAILED' THEN 'PERMANENT_FAILURE' ELSE 'DELIVERED' END,
                        CASE status WHEN 'FAILED' THEN 400 ELSE 200 END, '', ''
                    {history}""",
                    args,
                )
            conn.execute(
                f"""
                INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
                    target_timestamp_local, target_timezone, executed_at, failure_reason, version,
                    idempotency_key, created_at, updated_at)
                SELECT {_seq_uuid("a000", "i")}, {uid}, 'BIRTHDAY', 'PENDING',
                    (t AT TIME ZONE 'UTC')::date, t,
                    {_iso_utc("t")}, 'UTC', NULL, '', 1,
                    'p-' || lpad(to_hex(i), 20, '0'), now(), now()
                FROM (SELECT i, CASE WHEN i <= %(due)s THEN now() - make_interval(secs => mod(i, 3600))
                                     ELSE now() + make_interval(days => 1 + mod(i, 360)) END AS t
                      FROM generate_series(%(lo)s::int, %(hi)s::int) i) s""",
                args,
            )


def upcoming_labels(conn, *, teams: int) -> None:
    """Give each recipient one of `teams` labels, team:t0 to team:t<teams-1>, by their number."""
    conn.execute(
        "UPDATE users_user SET labels = ARRAY['team:t' || mod(abs(hashtext(id::text)), %s)]", [teams]
    )


def more_recipients(conn, *, first: int, last: int, chunk: int = 200_000) -> None:
    """Recipients `first` to `last` (numbered after yearly_history's), each with only a PENDING birthday later this year.

    What grows with the number of recipients and not with their history: the
    recipients table and the PENDING events, one per recipient.
    """
    uid = _seq_uuid("8000", "i")
    for lo in range(first, last + 1, chunk):
        args = {"lo": lo, "hi": min(last, lo + chunk - 1)}
        with conn.transaction():
            _numbered_users(conn, args)
            conn.execute(
                f"""
                INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
                    target_timestamp_local, target_timezone, executed_at, failure_reason, version,
                    idempotency_key, created_at, updated_at)
                SELECT {_seq_uuid("a000", "i")}, {uid}, 'BIRTHDAY', 'PENDING', (t AT TIME ZONE 'UTC')::date, t,
                    {_iso_utc("t")}, 'UTC', NULL, '', 1, 'p-' || lpad(to_hex(i), 20, '0'), now(), now()
                FROM (SELECT i, now() + make_interval(days => 1 + mod(i, 360)) AS t
                      FROM generate_series(%(lo)s::int, %(hi)s::int) i) s""",
                args,
            )


def older_history(conn, *, users: int, block: int, failed_every: int = 0, chunk: int = 100_000) -> None:
    """Nine more handled years for each of `users` users that yearly_history made, before theirs.

    Block 1 is 10 to 18 years back, block 2 19 to 27, and so on (minus up to 299
    days); each event with its delivery and one attempt, as yearly_history's
    `deliveries`. Rows of another block have other ids and keys, so blocks add up:
    the same recipients with more years of history.
    """
    first_year = 1 + 9 * block
    kind = f"{block:04x}"
    status = (
        f"CASE WHEN mod(i + y, {failed_every}) = 0 THEN 'FAILED' ELSE 'COMPLETED' END"
        if failed_every
        else "'COMPLETED'"
    )
    history = f"""
        FROM generate_series(%(lo)s::int, %(hi)s::int) i, generate_series(1, 9) y,
             LATERAL (SELECT (current_date - make_interval(years => y + {first_year - 1}))::date - mod(i, 300) AS d,
                             {status} AS status) dd"""
    event_id = f"('00000000-{kind}-4000-9000-' || lpad(to_hex(i * 16 + y), 12, '0'))::uuid"
    delivery_id = f"('00000000-{kind}-4000-b000-' || lpad(to_hex(i * 16 + y), 12, '0'))::uuid"
    key = f"'h{block}-' || lpad(to_hex(i * 16 + y), 20, '0')"
    for lo in range(1, users + 1, chunk):
        hi = min(users, lo + chunk - 1)
        args = {"lo": lo, "hi": hi}
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(
                f"""
                INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc,
                    target_timestamp_local, target_timezone, executed_at, failure_reason, version,
                    idempotency_key, created_at, updated_at)
                SELECT {event_id}, {_seq_uuid("8000", "i")}, 'BIRTHDAY', status, d, d + time '09:00',
                    to_char(d, 'YYYY-MM-DD') || 'T09:00:00+00:00', 'UTC', d + time '09:00:01', '', 3, {key}, now(), now()
                {history}""",
                args,
            )
            conn.execute(
                f"""
                INSERT INTO delivery_delivery (id, event_id, idempotency_key, endpoint_key, payload, status, attempts,
                    max_attempts, next_attempt_at, locked_until, locked_by, attempt_started_at, last_status_code,
                    last_error, delivered_at, created_at, updated_at)
                SELECT {delivery_id}, {event_id}, {key}, 'history',
                    jsonb_build_object('message', 'Hey, First' || i || ' Last' || i || ' it''s your birthday',
                                       'event_type', 'BIRTHDAY', 'occurrence_date', d::text),
                    CASE status WHEN 'FAILED' THEN 'DEAD' ELSE 'DELIVERED' END, 1, 8, d + time '09:00', NULL, '',
                    NULL, CASE status WHEN 'FAILED' THEN 400 ELSE 200 END, '',
                    CASE status WHEN 'FAILED' THEN NULL ELSE d + time '09:00:01' END, d + time '09:00', d + time '09:00:01'
                {history}""",
                args,
            )
            conn.execute(
                f"""
                INSERT INTO delivery_deliveryattempt (delivery_id, number, worker, started_at, finished_at, duration_ms,
                    outcome, status_code, error, response_excerpt)
                SELECT {delivery_id}, 1, 'bench', d + time '09:00', d + time '09:00:01', 12,
                    CASE status WHEN 'FAILED' THEN 'PERMANENT_FAILURE' ELSE 'DELIVERED' END,
                    CASE status WHEN 'FAILED' THEN 400 ELSE 200 END, '', ''
                {history}""",
                args,
            )


# A time-ordered UUID made in SQL (48-bit milliseconds, then random), like the
# product's uuid7: its rows land at the right-hand end of the key indexes too.
_UUID7_SQL = (
    "encode(overlay(uuid_send(gen_random_uuid()) placing "
    "substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6), "
    "'hex')::uuid"
)

# The rows a claim batch writes, written by PostgreSQL alone: the due events
# locked (SKIP LOCKED) and moved to PROCESSING, each recipient's next event
# (ON CONFLICT DO NOTHING, as the product inserts it) and each claimed event's
# delivery with a JSON body of the product's shape, in one statement and one
# transaction. No client work, no round trips: a lower bound for any claim
# that makes these writes on this schema (the next date is SQL's +1 year here,
# not the handlers' zoneinfo arithmetic; same rows, same indexes).
CLAIM_FLOOR = f"""
WITH c AS (
    SELECT e.id, e.user_id, e.occurrence_date, e.target_timestamp_utc, e.idempotency_key
    FROM scheduling_event e
    WHERE e.status = 'PENDING' AND e.target_timestamp_utc <= now()
    ORDER BY e.target_timestamp_utc LIMIT %(batch)s FOR UPDATE SKIP LOCKED),
moved AS (
    UPDATE scheduling_event e SET status = 'PROCESSING', version = e.version + 1, updated_at = now()
    FROM c WHERE e.id = c.id RETURNING e.id),
upcoming AS (
    INSERT INTO scheduling_event (id, user_id, event_type, occurrence_date, target_timestamp_utc,
        target_timestamp_local, target_timezone, idempotency_key, status, failure_reason, version,
        created_at, updated_at)
    SELECT {_UUID7_SQL}, c.user_id, 'BIRTHDAY', (c.occurrence_date + interval '1 year')::date,
           c.target_timestamp_utc + interval '1 year',
           {_iso_utc("c.target_timestamp_utc + interval '1 year'")},
           'UTC', 'event-' || substr(md5(c.id::text || ':next'), 1, 16), 'PENDING', '', 1, now(), now()
    FROM c
    ON CONFLICT DO NOTHING),
queued AS (
    INSERT INTO delivery_delivery (id, event_id, idempotency_key, endpoint_key, payload, status, attempts,
        max_attempts, next_attempt_at, locked_by, last_error, created_at, updated_at)
    SELECT {_UUID7_SQL}, c.id, c.idempotency_key, %(key)s,
           jsonb_build_object('message', 'Hey, ' || u.first_name || ' ' || u.last_name || ' it''s your birthday',
                              'event_id', c.id::text, 'event_type', 'BIRTHDAY', 'user_id', c.user_id::text,
                              'occurrence_date', c.occurrence_date::text,
                              'target_timestamp_utc', {_iso_utc("c.target_timestamp_utc")}),
           'QUEUED', 0, 8, now(), '', '', now(), now()
    FROM c JOIN users_user u ON u.id = c.user_id)
SELECT count(*) FROM moved
"""


def claim_floor(conn, *, batch: int, key: str) -> tuple[float, int]:
    """One claim batch written by PostgreSQL alone, committed: (milliseconds, events claimed)."""
    started = time.perf_counter()
    with conn.transaction():
        claimed = conn.execute(CLAIM_FLOOR, {"batch": batch, "key": key}).fetchone()[0]
    return (time.perf_counter() - started) * 1000, claimed


# The `zonerules` workload: every not-yet-due PENDING event of the imported
# recipients (the claims' due recipients are in UTC) moved one hour later with
# its local text's offset one hour less, as if every zone had been computed by
# rules one hour off (Asia/Almaty's 2024 change, everywhere): the wall time
# stays, so the product's pass sees an instant its local time describes and
# moves it back. One statement, one transaction, the columns the pass writes
# (target_timestamp_utc, target_timestamp_local, version, updated_at), so the
# same rows and index entries: it is also the floor under the pass.
_SHIFTED_OFFSET = (
    "extract(epoch FROM substr(target_timestamp_local, 1, 19)::timestamp"
    " - (target_timestamp_utc + interval '1 hour') AT TIME ZONE 'UTC')::int"
)
ZONE_SHIFT = f"""
UPDATE scheduling_event SET
    target_timestamp_utc = target_timestamp_utc + interval '1 hour',
    target_timestamp_local = substr(target_timestamp_local, 1, 19)
        || CASE WHEN {_SHIFTED_OFFSET} < 0 THEN '-' ELSE '+' END
        || to_char(make_interval(secs => abs({_SHIFTED_OFFSET})), 'HH24:MI'),
    version = version + 1, updated_at = now()
WHERE status = 'PENDING' AND target_timestamp_utc >= now() AND target_timezone <> 'UTC'
"""


# The claims' due events as IANA 2023d computed them in Asia/Almaty (UTC+6 then, UTC+5 since
# 2024a), to the second as the product writes them: a pass that read one would move it an hour
# later (its local text describes its instant, and the newer rules give that wall time another).
# They stay out of ZONE_SHIFT (already due); the workload checks that no pass wrote one.
ZONE_DUE_OLD_RULES = """
UPDATE scheduling_event SET
    target_timestamp_utc = date_trunc('second', target_timestamp_utc),
    target_timestamp_local = to_char(date_trunc('second', target_timestamp_utc) AT TIME ZONE 'UTC'
        + interval '6 hours', 'YYYY-MM-DD"T"HH24:MI:SS') || '+06:00',
    target_timezone = 'Asia/Almaty'
WHERE idempotency_key LIKE 'bench-%' AND status = 'PENDING'
"""


def zone_shift(conn) -> tuple[float, int]:
    """ZONE_SHIFT in one transaction, committed: (seconds, rows)."""
    started = time.perf_counter()
    with conn.transaction():
        rows = conn.execute(ZONE_SHIFT).rowcount
    return time.perf_counter() - started, rows
