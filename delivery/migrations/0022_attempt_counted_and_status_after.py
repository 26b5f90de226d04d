"""What each attempt led to: whether it counted against max_attempts, and the delivery's status after it.

A nullable column and one with a constant default: adding them rewrites nothing (PostgreSQL
records them in the catalogue only), so the attempt log of any size takes them at once. NULL
and "": an attempt recorded before they were kept.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0021_one_per_digest_partial"),
    ]

    operations = [
        migrations.AddField(
            model_name="deliveryattempt",
            name="counted",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="deliveryattempt",
            name="delivery_status_after",
            field=models.CharField(blank=True, db_default="", max_length=16),
        ),
    ]
