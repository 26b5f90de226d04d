"""Reads that say whether this web process can serve: the database and its migrations."""

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

    @property
    def ready(self) -> bool:
        return self.database and not self.unapplied

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
        if self.unapplied:
            return {
                "status": "unavailable",
                "reason": f"{len(self.unapplied)} migration(s) not applied: run manage.py migrate",
                "checks": {"database": "ok", "migrations": "unapplied"},
                "unapplied_migrations": self.unapplied,
            }
        return {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


def readiness(*, connection: BaseDatabaseWrapper | None = None) -> Readiness:
    """Whether the database answers and every migration of this code is applied to it.

    The plan check is the one `migrate` makes: a non-empty plan means this
    code expects tables or columns the database does not have yet (a deploy
    that started the web before migrating), so requests would fail.
    """
    connection = connection or connections[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        logger.warning("Readiness: database unreachable", extra={"error": database_error_reason(exc)})
        return Readiness(database=False)
    return Readiness(database=True, unapplied=[f"{migration.app_label}.{migration.name}" for migration, _ in plan])
