import datetime

from django.db import migrations, models

# The recipients' table has a row per person (100,000,000 in docs/capacity.md). A boolean
# with a constant database default is a change of the catalog alone. The new CHECK on
# date_of_birth admits every row the old one did, and a month and day stored in year 4
# (scheduling.celebration.YEARLESS_YEAR); added NOT VALID, it reads no row under the lock
# that blocks the table, and 0014 checks the existing rows under one that does not.
ADD_NOT_VALID = (
    'ALTER TABLE "users_user" ADD CONSTRAINT "user_date_of_birth_from_1900_or_yearless" '
    "CHECK (\"date_of_birth\" >= '1900-01-01'::date OR "
    "(\"date_of_birth\" >= '0004-01-01'::date AND \"date_of_birth\" <= '0004-12-31'::date)) NOT VALID"
)
CONSTRAINT = models.CheckConstraint(
    condition=models.Q(('date_of_birth__gte', datetime.date(1900, 1, 1)), models.Q(('date_of_birth__gte', datetime.date(4, 1, 1)), ('date_of_birth__lte', datetime.date(4, 12, 31))), _connector='OR'),
    name='user_date_of_birth_from_1900_or_yearless',
)


class Migration(migrations.Migration):

    dependencies = [
        ('users', '0012_teams_user_labels_by_rule'),
    ]

    operations = [
        migrations.AddField(
            model_name='user',
            name='hide_age',
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddConstraint(model_name='user', constraint=CONSTRAINT)],
            database_operations=[
                migrations.RunSQL(
                    ADD_NOT_VALID,
                    reverse_sql='ALTER TABLE "users_user" DROP CONSTRAINT "user_date_of_birth_from_1900_or_yearless"',
                )
            ],
        ),
        migrations.RemoveConstraint(
            model_name='user',
            name='user_date_of_birth_from_1900',
        ),
    ]
