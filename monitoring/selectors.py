"""Reads that say whether this web process can serve: the database, that it takes writes, and its migrations."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

from runtime.database import database_error_reason

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Readiness:
    database: bool
    # Migrations this code has and the database has not applied ("app.name").
    unapplied: list[str] = field(default_factory=list)
    # False while the server answers but takes no writes: a standby, or a primary
    # being switched over. Every request that writes would fail there.
    writable: bool = True

    @property
    def ready(self) -> bool:
        return self.database and self.writable and not self.unapplied

    def as_json(self) -> dict:
        """The probe's body: what was checked and, when not ready, why.

        No error text: the endpoint is public, and a connection error names
        hosts and ports; it is logged instead.
        """
        if not self.database:
            return {
                "status": "unavailable",
                "reason": "database unreachable",
                "checks": {"database": "unreachable", "migrations": "unknown"},
            }
        migrations = "unapplied" if self.unapplied else "ok"
        if not self.writable:
            return {
                "status": "unavailable",
                "reason": "database takes no writes (a standby, or a primary being switched over)",
                "checks": {"database": "read-only", "migrations": migrations},
            }
        if self.unapplied:
            return {
                "status": "unavailable",
                "reason": f"{len(self.unapplied)} migration(s) not applied: run manage.py migrate",
                "checks": {"database": "ok", "migrations": "unapplied"},
                "unapplied_migrations": self.unapplied,
            }
        return {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


def readiness(*, connection: BaseDatabaseWrapper | None = None) -> Readiness:
    """Whether the database answers, takes writes, and has every migration of this code applied.

    The plan check is the one `migrate` makes: a non-empty plan means this
    code expects tables or columns the database does not have yet (a deploy
    that started the web before migrating), so requests would fail.

    A connection found on a server that takes no writes is closed: Django
    would keep it (it answers reads), and the next probe and request must
    connect afresh, which through a multi-host DATABASE_URL
    (target_session_attrs=read-write) finds the new primary.
    """
    connection = connection or connections[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            # Whatever the current transaction is: in recovery (a standby), or
            # every new transaction read-only (a primary being demoted).
            cursor.execute(
                "SELECT pg_is_in_recovery() OR current_setting('default_transaction_read_only') = 'on'"
            )
            read_only = cursor.fetchone()[0]
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        logger.warning("Readiness: database unreachable", extra={"error": database_error_reason(exc)})
        return Readiness(database=False)
    if read_only:
        logger.warning("Readiness: the database takes no writes")
        if not connection.in_atomic_block:
            connection.close()
    return Readiness(
        database=True,
        writable=not read_only,
        unapplied=[f"{migration.app_label}.{migration.name}" for migration, _ in plan],
    )
