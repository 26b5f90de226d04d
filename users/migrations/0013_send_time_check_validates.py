"""The send time's whole-minutes check as Django validates it: the column cast to time, so that
validate_constraints() of a recipient without a send time types its NULL (date_trunc(unknown,
unknown) was ambiguous and logged a database error on every console save).

State only: the cast of a time column to time changes nothing the database checks, so the
constraint in the database stays as it is (no table scan to validate it again).
"""

import django.db.models.functions.comparison
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("users", "0012_teams_user_labels_by_rule"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="user",
                    name="user_send_time_whole_minutes",
                ),
                migrations.AddConstraint(
                    model_name="user",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "send_time",
                                django.db.models.functions.datetime.TruncMinute(
                                    django.db.models.functions.comparison.Cast("send_time", models.TimeField())
                                ),
                            )
                        ),
                        name="user_send_time_whole_minutes",
                    ),
                ),
            ],
        ),
    ]
