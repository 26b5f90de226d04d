from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CONCURRENTLY, as 0007: a plain CREATE INDEX would hold off every attempt
    # insert while the build reads the table; the index itself starts empty.
    atomic = False

    dependencies = [
        ("delivery", "0008_attempt_outlives_an_erased_delivery"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="deliveryattempt",
            index=models.Index(
                condition=models.Q(("delivery__isnull", True)),
                fields=["finished_at"],
                name="attempt_erased_finished_idx",
            ),
        ),
    ]
