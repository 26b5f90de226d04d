from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CONCURRENTLY: on a live attempt log, a plain CREATE INDEX would hold off
    # every worker's attempt insert for as long as the build reads the table.
    atomic = False

    dependencies = [
        ("delivery", "0006_delivery_requeued_at"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="deliveryattempt",
            index=models.Index(
                condition=models.Q(("outcome", "DELIVERED"), _negated=True),
                fields=["outcome", "delivery"],
                name="attempt_failed_idx",
            ),
        ),
    ]
