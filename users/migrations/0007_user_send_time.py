import django.db.models.functions.datetime
from django.db import migrations, models

# The recipients' table is the one with a row per person (100,000,000 of them in
# docs/capacity.md). A nullable column without a default is a change of the
# catalog alone. A CHECK constraint added plainly would read every row while
# holding the lock that blocks every read and write of the table; NOT VALID
# checks only the rows written from now on, and 0008 checks the others under a
# lock that lets reads and writes go on.
ADD_NOT_VALID = (
    'ALTER TABLE "users_user" ADD CONSTRAINT "user_send_time_whole_minutes" '
    "CHECK (\"send_time\" = (DATE_TRUNC('minute', \"send_time\")::time)) NOT VALID"
)


class Migration(migrations.Migration):

    dependencies = [
        ('users', '0006_user_name_trigram_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='user',
            name='send_time',
            field=models.TimeField(blank=True, help_text='Local time HH:MM; empty: the default.', null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name='user',
                    constraint=models.CheckConstraint(condition=models.Q(('send_time', django.db.models.functions.datetime.TruncMinute('send_time'))), name='user_send_time_whole_minutes'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    ADD_NOT_VALID,
                    reverse_sql='ALTER TABLE "users_user" DROP CONSTRAINT "user_send_time_whole_minutes"',
                ),
            ],
        ),
    ]
