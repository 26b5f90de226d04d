"""PostgreSQL fails over under running processes: a new primary, the same promises (issue 27).

Two PostgreSQL clusters of the test's own, from the binaries the suite already
uses (devtools/postgres.py): a primary, and a streaming standby that
pg_basebackup copies from it, each on a private port in a temporary folder. The
product is given ONE DATABASE_URL naming both, with
target_session_attrs=read-write: libpq tries the hosts in order and keeps the
first that takes writes, so every new connection finds whichever is the primary
now. A real scheduler and two real workers send 300 greetings, due one after
the other over 6 s (so that the scheduler claims all through the failover) to a
real local receiver answering in 100-300 ms. Once about a quarter have arrived,
the database fails over in one of three ways:

* crash: synchronous replication (every commit is on the standby before it
  returns); the primary crashes (pg_ctl stop -m immediate) and the standby is
  promoted 3 s later.
* switchover: synchronous replication; the primary turns read-only with every
  session kept open (default_transaction_read_only, as a demoted node that
  keeps its sockets does: Aurora's writer flip, a proxy that keeps the old
  backend), and once its last write transaction has ended the standby is
  promoted. The old primary stays up, read-only, to the end.
* asynchronous: the standby is cut off from the primary (primary_conninfo
  emptied) once a fifth have arrived, the product works on, the primary
  crashes once half have arrived, and the lagging standby is promoted: every
  commit in between is lost (DELIVERED marks, claims, next year's events, rows
  the lost claims created).

Each then counts at the receiver and on the new primary: every greeting
arrived; no key answered 200 twice, except in the asynchronous mode, where a
resend under the same key is the documented price of the lost commits;
nothing PROCESSING or SENDING once the leases have had time to run out; every
recipient still has its next event; no process exited and no log holds a
traceback; SIGTERM afterwards exits 0.
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from delivery.models import Delivery
from delivery.tests.pipeline import eventually, process_env, start_process, stop_all, wait_until
from delivery.tests.test_outage import CREATE_DUE_RECIPIENTS, RECIPIENTS, manage
from devtools.ports import free_port
from devtools.postgres import EmbeddedPostgres, EmbeddedPostgresError
from devtools.sink import Reply
from scheduling.models import Event

pytestmark = pytest.mark.slow

DATABASE_NAME = "birthday_failover"
EVENTS, DELIVERIES = Event._meta.db_table, Delivery._meta.db_table
# The greetings fall due one every 20 ms: 300 over 6 s.
DUE_EVERY = timedelta(milliseconds=20)
# After the primary crashes, the standby is promoted this much later (what a failover manager takes to decide).
PROMOTION_DELAY = 3.0


def query(cluster: EmbeddedPostgres, sql: str, params=None) -> list[tuple]:
    """Run one statement on that node alone; its rows, if it returns any."""
    with psycopg.connect(
        host="127.0.0.1",
        port=cluster.port,
        user="postgres",
        dbname=DATABASE_NAME,
        autocommit=True,
        connect_timeout=5,
    ) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def count(cluster: EmbeddedPostgres, sql: str) -> int:
    return query(cluster, sql)[0][0]


@dataclass
class ReplicatedPair:
    primary: EmbeddedPostgres
    standby: EmbeddedPostgres

    @property
    def url(self) -> str:
        """The one DATABASE_URL the product is given: both nodes, and libpq picks the one that takes writes."""
        return (
            f"postgres://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/{DATABASE_NAME}"
            "?target_session_attrs=read-write"
        )

    def replicate_synchronously(self) -> None:
        """Every commit on the primary returns only once the standby has it on disk."""
        query(self.primary, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        query(self.primary, "SELECT pg_reload_conf()")
        wait_until(
            lambda: count(self.primary, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
            == 1,
            30,
            "the standby to replicate synchronously",
        )


@pytest.fixture
def replicated_pair(tmp_path):
    """A migrated database of 300 recipients on a primary, and a streaming standby of it; both stopped at the end.

    Not under tmp_path: as root the servers run as an unprivileged account
    (devtools/postgres.py) that cannot enter pytest's root-only temporary
    folder. Their logs are copied into tmp_path at the end.
    """
    roots = {role: Path(tempfile.mkdtemp(prefix=f"failover-{role}-")) for role in ("primary", "standby")}
    primary = EmbeddedPostgres(root=roots["primary"], port=free_port())
    clusters = {"primary": primary}
    try:
        primary.start()
        primary.database_ensure(name=DATABASE_NAME)
        only_primary = f"postgres://postgres@127.0.0.1:{primary.port}/{DATABASE_NAME}"
        manage(["migrate", "--noinput"], only_primary)
        manage(["shell", "-c", CREATE_DUE_RECIPIENTS], only_primary)
        standby = clusters["standby"] = primary.standby_create(root=roots["standby"], port=free_port())
        standby.start()
        wait_until(
            lambda: count(primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == 1,
            30,
            "the standby to stream",
        )
        yield ReplicatedPair(primary=primary, standby=standby)
    finally:
        for role, cluster in clusters.items():
            try:
                cluster.stop()
            except EmbeddedPostgresError:
                pass
            if cluster.log.exists():
                shutil.copy(cluster.log, tmp_path / f"postgresql-{role}.log")
        for root in roots.values():
            shutil.rmtree(root, ignore_errors=True)


def arrived(sink) -> int:
    return len(set(sink.keys()))


def crash_and_promote(pair: ReplicatedPair, sink) -> dict:
    """The primary crashes; the standby, which has every commit, is promoted a few seconds later."""
    wait_until(lambda: arrived(sink) >= RECIPIENTS // 4, 60, "a quarter of the greetings to arrive")
    pair.primary.crash()
    at_failover = arrived(sink)
    time.sleep(PROMOTION_DELAY)
    pair.standby.promote()
    return {"arrived at the failover": at_failover}


def switch_over_leaving_the_old_primary_up(pair: ReplicatedPair, sink) -> dict:
    """The primary turns read-only with its sessions open; once no write is under way there, the standby is promoted."""
    wait_until(lambda: arrived(sink) >= RECIPIENTS // 4, 60, "a quarter of the greetings to arrive")
    query(pair.primary, "ALTER SYSTEM SET default_transaction_read_only = on")
    query(pair.primary, "SELECT pg_reload_conf()")
    at_failover = arrived(sink)
    # Transactions begun before the reload may still write and commit (synchronously:
    # the standby gets them). Promoting before they end would strand their commits
    # waiting for a standby that no longer follows.
    wait_until(
        lambda: count(
            pair.primary,
            "SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()",
        )
        == 0,
        30,
        "the writes under way on the old primary to end",
    )
    pair.standby.promote()
    sessions_left = count(
        pair.primary,
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid() AND datname = current_database()",
    )
    return {
        "arrived at the failover": at_failover,
        "sessions open on the old primary at promotion": sessions_left,
    }


def lose_the_last_commits(pair: ReplicatedPair, sink) -> dict:
    """Asynchronous: the standby is cut off, the primary works on, crashes, and the lagging standby is promoted."""
    wait_until(lambda: arrived(sink) >= RECIPIENTS // 5, 60, "a fifth of the greetings to arrive")
    query(pair.standby, "ALTER SYSTEM SET primary_conninfo = ''")
    query(pair.standby, "SELECT pg_reload_conf()")
    wait_until(
        lambda: count(pair.primary, "SELECT count(*) FROM pg_stat_replication") == 0,
        30,
        "the standby to be cut off",
    )
    wait_until(lambda: arrived(sink) >= RECIPIENTS // 2, 60, "half of the greetings to arrive")
    delivered_on_the_primary = count(
        pair.primary, f"SELECT count(*) FROM {DELIVERIES} WHERE status = 'DELIVERED'"
    )
    pair.primary.crash()
    at_failover = arrived(sink)
    time.sleep(PROMOTION_DELAY)
    pair.standby.promote()
    delivered_on_the_new_primary = count(
        pair.standby, f"SELECT count(*) FROM {DELIVERIES} WHERE status = 'DELIVERED'"
    )
    # Else this mode would test nothing the synchronous crash does not.
    assert delivered_on_the_new_primary < delivered_on_the_primary, "the failover lost no commit"
    return {
        "arrived at the failover": at_failover,
        "DELIVERED marks lost": delivered_on_the_primary - delivered_on_the_new_primary,
    }


@pytest.mark.parametrize(
    "fail_over, synchronous, resends_allowed",
    [
        pytest.param(crash_and_promote, True, False, id="crash"),
        pytest.param(switch_over_leaving_the_old_primary_up, True, False, id="switchover"),
        pytest.param(lose_the_last_commits, False, True, id="asynchronous"),
    ],
)
def test_a_failover_under_running_processes_loses_nothing_and_no_process_exits(
    replicated_pair,
    delivery_settings,
    sink,
    tmp_path,
    fail_over: Callable[[ReplicatedPair, object], dict],
    synchronous: bool,
    resends_allowed: bool,
):
    # Given 300 greetings falling due over 6 s on a primary with a standby, one multi-host
    # DATABASE_URL, a 3 s lease and a receiver answering in 100-300 ms
    pair = replicated_pair
    if synchronous:
        pair.replicate_synchronously()
    query(
        pair.primary,
        f"WITH numbered AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM {EVENTS} WHERE status = 'PENDING') "
        f"UPDATE {EVENTS} e SET target_timestamp_utc = now() + n * %s FROM numbered WHERE e.id = numbered.id",
        [DUE_EVERY],
    )
    expected = {key for (key,) in query(pair.primary, f"SELECT idempotency_key FROM {EVENTS}")}
    assert len(expected) == RECIPIENTS
    latency = random.Random(27)
    sink.respond = lambda received: Reply(status=200, delay=latency.uniform(0.1, 0.3))
    env = process_env(delivery_settings, DATABASE_URL=pair.url)
    logs = [tmp_path / name for name in ("scheduler.log", "worker-1.log", "worker-2.log")]
    processes = [start_process(["run_scheduler", "--batch-size", "50"], env, logs[0])]
    processes += [
        start_process(["run_worker", "--concurrency", "4", "--batch-size", "20"], env, log)
        for log in logs[1:]
    ]
    new_primary = pair.standby
    try:
        # When the database fails over while greetings are being claimed, sent and recorded
        seen = fail_over(pair, sink)
        promoted, promoted_at = time.monotonic(), query(new_primary, "SELECT now()")[0][0]

        # Then, once the leases have had time to run out, everything is delivered and recorded on the new primary
        settled = sink.wait_for(RECIPIENTS, timeout=120) and eventually(
            lambda: count(
                new_primary,
                f"SELECT (SELECT count(*) FROM {DELIVERIES} WHERE status <> 'DELIVERED')"
                f" + (SELECT count(*) FROM {EVENTS} WHERE status = 'PROCESSING')",
            )
            == 0,
            timeout=90,
        )
        settled_after = time.monotonic() - promoted
        time.sleep(2)  # a resend already on its way would arrive now
        running = [process.poll() is None for process in processes]
    finally:
        exit_codes = stop_all(processes)

    # ...no process exited, each stopped cleanly on SIGTERM, and no log holds a traceback...
    assert running == [True, True, True], f"exited: {[p.returncode for p in processes]} ({seen})"
    assert exit_codes == [0, 0, 0], exit_codes
    for log in logs:
        assert "Traceback" not in log.read_text(), f"{log.name} holds a traceback"
    # ...every greeting arrived, none with a key of its own...
    counts = Counter(sink.keys())
    missing = expected - set(counts)
    assert not missing, f"{len(missing)} of {RECIPIENTS} greetings never arrived ({seen})"
    assert set(counts) == expected
    # ...and none was accepted twice, except after lost commits, under its own key.
    accepted = Counter(received.idempotency_key for received in sink.received if received.status == 200)
    twice = {key: n for key, n in accepted.items() if n > 1}
    if not resends_allowed:
        assert not twice, f"{len(twice)} greetings were accepted twice: {sorted(twice)[:5]} ({seen})"
    # The new primary agrees: every greeting DELIVERED and its event COMPLETED, nothing
    # left PROCESSING or SENDING, and every recipient has its next event.
    assert settled, f"not settled {settled_after:.0f} s after the promotion ({seen})"
    events = dict(query(new_primary, f"SELECT status, count(*) FROM {EVENTS} GROUP BY status"))
    assert events == {"COMPLETED": RECIPIENTS, "PENDING": RECIPIENTS}, (events, seen)
    deliveries = dict(query(new_primary, f"SELECT status, count(*) FROM {DELIVERIES} GROUP BY status"))
    assert deliveries == {"DELIVERED": RECIPIENTS}, (deliveries, seen)
    without_next = count(
        new_primary,
        f"SELECT count(DISTINCT user_id) FROM {EVENTS} done WHERE status = 'COMPLETED' AND NOT EXISTS "
        f"(SELECT 1 FROM {EVENTS} nxt WHERE nxt.user_id = done.user_id AND nxt.status = 'PENDING')",
    )
    assert without_next == 0, f"{without_next} recipients have no next event"
    first_recorded = query(
        new_primary,
        f"SELECT min(delivered_at) - %s FROM {DELIVERIES} WHERE delivered_at > %s",
        [promoted_at] * 2,
    )[0][0]
    print(  # what the run saw, for pytest -rP
        f"{seen}; first delivery recorded on the new primary {first_recorded.total_seconds():.1f} s after the "
        f"promotion, all settled after {settled_after:.1f} s; {sum(counts.values())} requests for {RECIPIENTS} "
        f"greetings, {len(twice)} accepted twice"
    )
