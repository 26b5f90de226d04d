from django.db import migrations


class Migration(migrations.Migration):
    """Check the rows written before 0009 against its constraints, in a transaction of its own (see 0008)."""

    dependencies = [
        ('users', '0009_user_pause'),
    ]

    operations = [
        migrations.RunSQL(
            'ALTER TABLE "users_user" VALIDATE CONSTRAINT "user_paused_by_whom"', reverse_sql=migrations.RunSQL.noop
        ),
        migrations.RunSQL(
            'ALTER TABLE "users_user" VALIDATE CONSTRAINT "user_resumed_after_a_pause"',
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
