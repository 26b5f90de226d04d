"""Always clean the partial claim index on VACUUM (PostgreSQL only).

PostgreSQL 14+ skips index cleanup when under 2% of pages hold dead rows. Every
claim turns a PENDING row into a dead entry of event_pending_due_idx, so without
this the claim query reads ever more dead index pages (QUEUE-NOTES lesson 4).
"""

from django.db import migrations


def enable_index_cleanup(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE scheduling_event SET (vacuum_index_cleanup = on)")


def reset_index_cleanup(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE scheduling_event RESET (vacuum_index_cleanup)")


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]
    operations = [migrations.RunPython(enable_index_cleanup, reset_index_cleanup)]
