from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("users", "0002_name_not_blank_any_whitespace"),
    ]

    operations = [
        migrations.AddField(
            model_name="user",
            name="version",
            field=models.PositiveIntegerField(db_default=1, default=1, editable=False),
        ),
    ]
