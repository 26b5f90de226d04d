from django.db import migrations


class Migration(migrations.Migration):
    """Check the rows written before 0013 against its constraint, in a transaction of its own.

    VALIDATE CONSTRAINT takes a SHARE UPDATE EXCLUSIVE lock: the API, the import and the
    scheduler's claim go on reading and writing meanwhile.
    """

    dependencies = [
        ('users', '0013_celebrant_user_hide_age_birthday_without_year'),
    ]

    operations = [
        migrations.RunSQL(
            'ALTER TABLE "users_user" VALIDATE CONSTRAINT "user_date_of_birth_from_1900_or_yearless"',
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
