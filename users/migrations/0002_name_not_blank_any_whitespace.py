"""A name of only tabs or newlines is blank too: TRIM() strips spaces alone."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("users", "0001_initial")]

    operations = [
        migrations.RemoveConstraint(model_name="user", name="user_first_name_not_blank"),
        migrations.AddConstraint(
            model_name="user",
            constraint=models.CheckConstraint(
                condition=models.Q(("first_name__regex", "\\S")), name="user_first_name_not_blank"
            ),
        ),
        migrations.RemoveConstraint(model_name="user", name="user_last_name_not_blank"),
        migrations.AddConstraint(
            model_name="user",
            constraint=models.CheckConstraint(
                condition=models.Q(("last_name__regex", "\\S")), name="user_last_name_not_blank"
            ),
        ),
    ]
