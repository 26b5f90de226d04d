import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """An attempt's delivery may be NULL: what an erased recipient's attempts keep.

    Only DROP NOT NULL, a change of the catalog: Django's own SQL for this would
    drop and add the foreign key again, and adding it checks every attempt
    against the deliveries while writes to both tables wait. The constraint
    itself does not change.
    """

    dependencies = [
        ('delivery', '0007_attempt_failed_idx'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='deliveryattempt',
                    name='delivery',
                    field=models.ForeignKey(db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_log', to='delivery.delivery'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    'ALTER TABLE "delivery_deliveryattempt" ALTER COLUMN "delivery_id" DROP NOT NULL',
                    # Back only once the erased recipients' attempts are gone.
                    reverse_sql='ALTER TABLE "delivery_deliveryattempt" ALTER COLUMN "delivery_id" SET NOT NULL',
                ),
            ],
        ),
    ]
