"""One delivery per digest, held by a partial unique index that no occurrence's delivery is in.

A move of a delivery (claimed, delivered, retried) changes its status, which an
index holds, so it is never a HOT update: PostgreSQL writes a new entry in every
index of the table that holds the row. The full unique index of `digest_id`
held every occurrence's delivery, under NULL, and took one such entry at each
claim and each record; the partial one holds only the digests' deliveries. NULLs
never collide in a unique index, so it refuses exactly what the full one did.

Not atomic, as 0007, 0009 and 0013: the new index is built CONCURRENTLY, before the
old constraint is dropped, so at no moment is a digest without its guard and no
delivery update waits for the build. The foreign key itself is not touched
(Django's own AlterField would drop and re-add it, checking every row under a
lock).
"""

from django.db import migrations, models

TABLE = "delivery_delivery"
INDEX = "delivery_one_per_digest"

# The old constraint's name is PostgreSQL's own (delivery_delivery_digest_id_key where
# Django's schema editor created it): found by its column, not assumed.
DROP_FULL_UNIQUE = f"""
DO $$
DECLARE found text;
BEGIN
    SELECT c.conname INTO found
    FROM pg_constraint c
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attname = 'digest_id'
    WHERE c.conrelid = '{TABLE}'::regclass AND c.contype = 'u' AND c.conkey = ARRAY[a.attnum]::int2[];
    IF found IS NOT NULL THEN
        EXECUTE format('ALTER TABLE {TABLE} DROP CONSTRAINT %I', found);
    END IF;
END $$;
"""


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("delivery", "0020_urlparts_url_display"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "{INDEX}" ON "{TABLE}" ("digest_id") '
                    'WHERE "digest_id" IS NOT NULL',
                    reverse_sql=f'DROP INDEX CONCURRENTLY IF EXISTS "{INDEX}"',
                ),
            ],
            state_operations=[
                migrations.AddConstraint(
                    model_name="delivery",
                    constraint=models.UniqueConstraint(
                        condition=models.Q(("digest__isnull", False)), fields=("digest",), name=INDEX
                    ),
                ),
            ],
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    DROP_FULL_UNIQUE,
                    reverse_sql=f'ALTER TABLE "{TABLE}" ADD CONSTRAINT "{TABLE}_digest_id_key" UNIQUE ("digest_id")',
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="delivery",
                    name="digest",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=models.deletion.CASCADE,
                        related_name="deliveries",
                        to="delivery.digest",
                    ),
                ),
            ],
        ),
    ]
