"""Merges digests' migrations with main's lanes merge (0017_merge_lanes): no operation."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0017_digests_merge_main"),
        ("delivery", "0017_merge_lanes"),
    ]

    operations = []
