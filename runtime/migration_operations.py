"""Migration operations shared by the apps."""

from django.apps.registry import Apps
from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor


def always_clean_indexes_on_vacuum(table: str) -> migrations.RunPython:
    """Make VACUUM always clean `table`'s indexes.

    PostgreSQL 14+ skips index cleanup when under 2% of pages hold dead rows.
    Queue tables turn every claimed row into a dead entry of a small partial
    index; without cleanup each claim reads ever more dead index pages, and
    a plain VACUUM under that threshold leaves them where they are.
    """

    def forwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        schema_editor.execute(f"ALTER TABLE {table} SET (vacuum_index_cleanup = on)")

    def backwards(apps: Apps, schema_editor: BaseDatabaseSchemaEditor) -> None:
        schema_editor.execute(f"ALTER TABLE {table} RESET (vacuum_index_cleanup)")

    return migrations.RunPython(forwards, backwards)
