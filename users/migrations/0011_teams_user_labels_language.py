import django.contrib.postgres.fields
import django.contrib.postgres.indexes
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# A live recipients table stays writable throughout: the columns are a change of
# the catalog alone (a constant default PostgreSQL keeps there, no row rewritten);
# the check is added NOT VALID (only new writes are checked while the table is
# locked) and then validated under a lock that lets reads and writes go on; the
# index is built CONCURRENTLY (as 0006's).
LABELS_AT_MOST_MAX = "array_length(\"labels\", 1) <= 20"

def add_not_valid(name: str, check: str) -> list[migrations.RunSQL]:
    """The check added NOT VALID, then validated: the rows are read under a lock that lets writes go on."""
    return [
        migrations.RunSQL(
            f'ALTER TABLE "users_user" ADD CONSTRAINT "{name}" CHECK ({check}) NOT VALID',
            reverse_sql=f'ALTER TABLE "users_user" DROP CONSTRAINT "{name}"',
        ),
        migrations.RunSQL(f'ALTER TABLE "users_user" VALIDATE CONSTRAINT "{name}"', reverse_sql=migrations.RunSQL.noop),
    ]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("users", "0010_user_pause_validate"),
    ]

    operations = [
        migrations.AddField(
            model_name="user",
            name="labels",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=50), blank=True, db_default=[], default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="user",
            name="language",
            field=models.CharField(blank=True, db_default="", default="", max_length=35),
        ),
        AddIndexConcurrently(
            model_name="user",
            index=django.contrib.postgres.indexes.GinIndex(fields=["labels"], name="user_labels_idx"),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="user",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("labels__len__lte", 20)), name="user_labels_at_most_max"
                    ),
                ),
            ],
            database_operations=[
                *add_not_valid("user_labels_at_most_max", LABELS_AT_MOST_MAX),
            ],
        ),
    ]
