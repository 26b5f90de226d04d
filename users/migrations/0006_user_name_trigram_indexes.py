from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.operations import AddIndexConcurrently, TrigramExtension
from django.db import migrations
from django.db.models.functions import Upper


class Migration(migrations.Migration):
    # CONCURRENTLY: on a live recipients table a plain CREATE INDEX would hold off
    # every API create and edit for as long as the build reads all of it.
    atomic = False

    dependencies = [
        ("users", "0005_user_anniversary_date"),
    ]

    operations = [
        # A trusted extension since PostgreSQL 13: the database's owner may create it.
        TrigramExtension(),
        AddIndexConcurrently(
            model_name="user",
            index=GinIndex(OpClass(Upper("first_name"), name="gin_trgm_ops"), name="user_first_name_trgm_idx"),
        ),
        AddIndexConcurrently(
            model_name="user",
            index=GinIndex(OpClass(Upper("last_name"), name="gin_trgm_ops"), name="user_last_name_trgm_idx"),
        ),
    ]
