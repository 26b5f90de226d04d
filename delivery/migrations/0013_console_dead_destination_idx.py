from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CONCURRENTLY, as 0007 and 0009: a plain CREATE INDEX would hold off every delivery
    # update while the build reads the table.
    atomic = False

    dependencies = [
        ("delivery", "0012_console_failure_acknowledgement"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("status", "DEAD")),
                fields=["destination", "updated_at"],
                name="delivery_dead_destination_idx",
            ),
        ),
    ]
