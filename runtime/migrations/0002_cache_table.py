from django.core.management import call_command
from django.db import migrations


def create_cache_tables(apps, schema_editor):
    # The rate-limit counters' table (CACHE_URL's default, dbcache://django_cache).
    # createcachetable is Django's own command for it; running it here means every
    # `migrate` (make run, make test, a deployment) has the table, and a cache
    # configured elsewhere (Redis) makes it do nothing.
    call_command("createcachetable", database=schema_editor.connection.alias, verbosity=0)


def drop_cache_tables(apps, schema_editor):
    from django.conf import settings

    for cache in settings.CACHES.values():
        if cache["BACKEND"] == "django.core.cache.backends.db.DatabaseCache":
            schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(cache['LOCATION'])}")


class Migration(migrations.Migration):
    dependencies = [
        ("runtime", "0001_initial"),
    ]

    operations = [
        migrations.RunPython(create_cache_tables, drop_cache_tables),
    ]
