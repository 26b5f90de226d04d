from django.db import migrations

from runtime.migration_operations import always_clean_indexes_on_vacuum


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]
    operations = [always_clean_indexes_on_vacuum("scheduling_event")]
