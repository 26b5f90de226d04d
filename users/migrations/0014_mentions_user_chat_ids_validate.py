from django.db import migrations


class Migration(migrations.Migration):
    """Check the rows written before 0013 against its constraints, in a transaction of its own (see 0010)."""

    dependencies = [
        ('users', '0013_mentions_user_chat_ids'),
    ]

    operations = [
        migrations.RunSQL(
            f'ALTER TABLE "users_user" VALIDATE CONSTRAINT "{name}"', reverse_sql=migrations.RunSQL.noop
        )
        for name in ("user_slack_user_id_shape", "user_discord_user_id_shape", "user_teams_user_id_shape")
    ]
