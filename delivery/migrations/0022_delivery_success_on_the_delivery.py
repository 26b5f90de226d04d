"""A success recorded on its delivery: the three columns its attempt needs beside the row's own.

A success writes no attempt row any more (delivery.worker.record); its worker, its
duration and the receiver's answer are kept on the delivery, which holds the rest
(delivery.selectors.SUCCESS_ATTEMPT_COLUMNS). Null or a constant default: adding
them rewrites no row (the duration's check of non-negative values reads the table once).
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('delivery', '0021_one_per_digest_partial'),
    ]

    operations = [
        migrations.AddField(
            model_name='delivery',
            name='delivered_by',
            field=models.CharField(blank=True, db_default='', default='', max_length=200),
        ),
        migrations.AddField(
            model_name='delivery',
            name='delivered_duration_ms',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='delivery',
            name='delivered_response',
            field=models.TextField(blank=True, db_default='', default=''),
        ),
    ]
