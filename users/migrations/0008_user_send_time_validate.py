from django.db import migrations


class Migration(migrations.Migration):
    """Check the rows written before 0007 against its constraint, in a transaction of its own.

    VALIDATE CONSTRAINT takes a SHARE UPDATE EXCLUSIVE lock: the API, the
    import and the scheduler's claim go on reading and writing meanwhile.
    """

    dependencies = [
        ('users', '0007_user_send_time'),
    ]

    operations = [
        migrations.RunSQL(
            'ALTER TABLE "users_user" VALIDATE CONSTRAINT "user_send_time_whole_minutes"',
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
