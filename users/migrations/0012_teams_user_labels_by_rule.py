import django.db.models.lookups
from django.db import migrations, models


# As 0011's: added NOT VALID (only new writes are checked while the table is locked), then
# validated under a lock that lets reads and writes go on.
LABELS_BY_RULE = (
    """array_to_string("labels", ' ')::text ~ """
    """'^([a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?( [a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?)*)?$' """
    """AND cardinality("labels") = cardinality(string_to_array(array_to_string("labels", ' '), ' '))"""
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('users', '0011_teams_user_labels_language'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
        migrations.AddConstraint(
            model_name='user',
            constraint=models.CheckConstraint(condition=models.Q(django.db.models.lookups.Regex(models.Func(models.F('labels'), models.Value(' '), function='array_to_string', output_field=models.CharField()), '^([a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?( [a-z0-9][a-z0-9._-]*(:[a-z0-9][a-z0-9._-]*)?)*)?$'), django.db.models.lookups.Exact(models.Func(models.F('labels'), function='cardinality', output_field=models.IntegerField()), models.Func(models.Func(models.Func(models.F('labels'), models.Value(' '), function='array_to_string', output_field=models.CharField()), models.Value(' '), function='string_to_array'), function='cardinality', output_field=models.IntegerField()))), name='user_labels_by_rule'),
        ),
    ],
            database_operations=[
                migrations.RunSQL(
                    f'ALTER TABLE "users_user" ADD CONSTRAINT "user_labels_by_rule" CHECK ({LABELS_BY_RULE}) NOT VALID',
                    reverse_sql='ALTER TABLE "users_user" DROP CONSTRAINT "user_labels_by_rule"',
                ),
                migrations.RunSQL(
                    'ALTER TABLE "users_user" VALIDATE CONSTRAINT "user_labels_by_rule"',
                    reverse_sql=migrations.RunSQL.noop,
                ),
            ],
        ),
    ]
