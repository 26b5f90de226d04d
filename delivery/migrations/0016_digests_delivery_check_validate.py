from django.db import migrations


class Migration(migrations.Migration):
    """Check the deliveries written before 0015 against delivery_event_or_digest, in a transaction of its own."""

    dependencies = [
        ("delivery", "0015_digests_digest"),
    ]

    operations = [
        migrations.RunSQL(
            'ALTER TABLE "delivery_delivery" VALIDATE CONSTRAINT "delivery_event_or_digest"',
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
