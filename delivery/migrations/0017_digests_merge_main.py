"""Merges digests' migrations (0014-0016 digests) with main's (teams' and console's merges): no operation."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0016_digests_delivery_check_validate"),
        ("delivery", "0016_merge_console"),
    ]

    operations = []
