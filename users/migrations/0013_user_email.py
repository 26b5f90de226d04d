from django.db import migrations, models

# As 0012's: the column with a constant default changes the catalog alone (no row is
# rewritten); the CHECK constraint is added NOT VALID (only new writes are checked
# while the table is locked), then validated under a lock that lets reads and writes
# go on. Outside one transaction (atomic = False), so the two locks are not held together.
EMAIL_NORMALISED = "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+@[a-z0-9-]+(\\.[a-z0-9-]+)+$"


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('users', '0012_teams_user_labels_by_rule'),
    ]

    operations = [
        migrations.AddField(
            model_name='user',
            name='email',
            field=models.CharField(blank=True, db_default='', default='', max_length=254),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name='user',
                    constraint=models.CheckConstraint(condition=models.Q(('email', ''), ('email__regex', EMAIL_NORMALISED), _connector='OR'), name='user_email_normalised'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    [
                        (
                            'ALTER TABLE "users_user" ADD CONSTRAINT "user_email_normalised" '
                            "CHECK (\"email\" = '' OR \"email\"::text ~ %s) NOT VALID",
                            [EMAIL_NORMALISED],
                        )
                    ],
                    reverse_sql='ALTER TABLE "users_user" DROP CONSTRAINT "user_email_normalised"',
                ),
                migrations.RunSQL(
                    'ALTER TABLE "users_user" VALIDATE CONSTRAINT "user_email_normalised"',
                    reverse_sql=migrations.RunSQL.noop,
                ),
            ],
        ),
    ]
