from django.db import migrations

from runtime.migration_operations import always_clean_indexes_on_vacuum


class Migration(migrations.Migration):
    dependencies = [("delivery", "0001_initial")]
    operations = [always_clean_indexes_on_vacuum("delivery_delivery")]
