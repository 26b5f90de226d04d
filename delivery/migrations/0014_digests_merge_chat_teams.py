"""Merges the chat kinds' migrations (0012-0013 chat) with the audiences' (0012-0013 teams): no operation."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0013_chat_endpoint_gone"),
        ("delivery", "0013_teams_destination_message_overrides"),
    ]

    operations = []
