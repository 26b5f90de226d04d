"""Receiver URLs are credentials (delivery.credentials.receiver_urls): encrypted at rest, known by a keyed hash, shown redacted.

Converts what is stored, in one transaction:

* each destination's URL: normalised (scheme and host lower-cased, default port
  and fragment dropped), encrypted, its keyed hash and redacted form beside it.
  A user name and password in a URL stay in the encrypted URL (the receiver
  keeps getting them until an operator replaces the URL: new URLs refuse them).
  Two destinations whose URLs are one receiver spelt two ways stop the
  migration, naming both: which one to keep is the operator's choice.
* each delivery names its endpoint by that hash instead of copying the URL
  (every row is rewritten once: one UPDATE per batch of distinct URLs).
* the endpoints: one per receiver (rows of one receiver spelt several ways are
  merged into one, a paused one kept so the pause stays), each with its URL
  encrypted; a row no destination and no unsent delivery uses any more (an
  edited URL's, left behind) is deleted, and a receiver that something unsent
  goes to without a row gets one.

Reversed (a rollback), the URLs are decrypted back into the old columns; a
delivery's URL is known again only where a destination or an endpoint still
has its key (its history to a receiver no longer configured keeps none).
"""

from django.db import migrations, models

from delivery.credentials.receiver_urls import url_encrypt, url_key, url_normalise_keeping_userinfo, url_redact

BATCH = 1000
UNSENT = ("QUEUED", "SENDING")


def _fields(url):
    return {"url_ciphertext": url_encrypt(url), "url_display": url_redact(url)}


def forward(apps, schema_editor):
    # Checked at once, not at commit: the ALTER TABLEs after this would refuse a table with pending trigger
    # events (the deleted endpoints' foreign keys).
    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    Destination = apps.get_model("delivery", "Destination")
    Endpoint = apps.get_model("delivery", "Endpoint")
    connection = schema_editor.connection

    urls_by_key = {}
    names_by_key = {}
    for destination in Destination.objects.order_by("id"):
        url = url_normalise_keeping_userinfo(destination.url)
        key = url_key(url)
        if key in names_by_key:
            raise RuntimeError(
                f"Destinations {names_by_key[key]!r} and {destination.name!r} send to one receiver, its URL "
                "spelt two ways: give one of them another URL, or delete it, then migrate again."
            )
        names_by_key[key] = destination.name
        urls_by_key[key] = url
        Destination.objects.filter(pk=destination.pk).update(url_key=key, **_fields(url))

    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT endpoint_url FROM delivery_delivery")
        delivery_urls = [row[0] for row in cursor.fetchall()]
        keys_of = {}
        for raw in delivery_urls:
            url = url_normalise_keeping_userinfo(raw)
            keys_of[raw] = url_key(url)
            urls_by_key.setdefault(keys_of[raw], url)
        for start in range(0, len(delivery_urls), BATCH):
            chunk = delivery_urls[start : start + BATCH]
            cursor.execute(
                "UPDATE delivery_delivery d SET endpoint_key = v.key FROM (VALUES "
                + ", ".join(["(%s, %s)"] * len(chunk))
                + ") AS v(url, key) WHERE d.endpoint_url = v.url",
                [value for raw in chunk for value in (raw, keys_of[raw])],
            )
        cursor.execute(
            "SELECT DISTINCT endpoint_key FROM delivery_delivery WHERE status IN (%s, %s)", list(UNSENT)
        )
        needed = set(names_by_key) | {row[0] for row in cursor.fetchall()}

    groups = {}
    for endpoint in Endpoint.objects.order_by("id"):
        url = url_normalise_keeping_userinfo(endpoint.url)
        key = url_key(url)
        urls_by_key.setdefault(key, url)
        groups.setdefault(key, []).append(endpoint)
    for key, group in groups.items():
        if key not in needed:
            Endpoint.objects.filter(pk__in=[e.pk for e in group]).delete()
            continue
        # A paused one first: an operator's pause outlives the merge.
        keep = sorted(group, key=lambda e: (e.state != "PAUSED", e.pk))[0]
        Endpoint.objects.filter(pk__in=[e.pk for e in group if e.pk != keep.pk]).delete()
        Endpoint.objects.filter(pk=keep.pk).update(key=key, **_fields(urls_by_key[key]))
    for key in needed - set(groups):
        Endpoint.objects.create(key=key, **_fields(urls_by_key[key]))


def backward(apps, schema_editor):
    from delivery.credentials.receiver_urls import url_decrypt

    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    Destination = apps.get_model("delivery", "Destination")
    Endpoint = apps.get_model("delivery", "Endpoint")
    urls_by_key = {}
    for model, key_field in ((Endpoint, "key"), (Destination, "url_key")):
        # Only the columns read: unapplied beside other branches' migrations, the state here may hold
        # columns a branch unapplied first has already dropped (Django orders a backward plan per branch).
        for row in model.objects.only("pk", "url_ciphertext", key_field):
            url = url_decrypt(row.url_ciphertext)
            urls_by_key[getattr(row, key_field)] = url
            model.objects.filter(pk=row.pk).update(url=url)
    keys = list(urls_by_key)
    with schema_editor.connection.cursor() as cursor:
        for start in range(0, len(keys), BATCH):
            chunk = keys[start : start + BATCH]
            cursor.execute(
                "UPDATE delivery_delivery d SET endpoint_url = v.url FROM (VALUES "
                + ", ".join(["(%s, %s)"] * len(chunk))
                + ") AS v(key, url) WHERE d.endpoint_key = v.key",
                [value for key in chunk for value in (key, urls_by_key[key])],
            )
        cursor.execute("UPDATE delivery_delivery SET endpoint_url = '' WHERE endpoint_url IS NULL")


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0011_recoveries"),
    ]

    operations = [
        migrations.AddField(
            model_name="destination",
            name="url_ciphertext",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="destination",
            name="url_key",
            field=models.CharField(max_length=32, null=True),
        ),
        migrations.AddField(
            model_name="destination",
            name="url_display",
            field=models.CharField(default="", max_length=300),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="endpoint",
            name="key",
            field=models.CharField(max_length=32, null=True),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="url_ciphertext",
            field=models.TextField(default=""),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="endpoint",
            name="url_display",
            field=models.CharField(default="", max_length=300),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="delivery",
            name="endpoint_key",
            field=models.CharField(default="", max_length=32),
            preserve_default=False,
        ),
        # Nullable while converted, so that a rollback (which adds them back empty, then runs `backward`)
        # can fill them before they are NOT NULL again.
        migrations.AlterField(
            model_name="destination", name="url", field=models.URLField(max_length=2000, null=True)
        ),
        migrations.AlterField(
            model_name="endpoint", name="url", field=models.URLField(max_length=2000, null=True)
        ),
        migrations.AlterField(
            model_name="delivery", name="endpoint_url", field=models.URLField(max_length=2000, null=True)
        ),
        migrations.RunPython(forward, backward, elidable=False),
        migrations.RemoveField(model_name="destination", name="url"),
        migrations.RemoveField(model_name="endpoint", name="url"),
        migrations.RemoveField(model_name="delivery", name="endpoint_url"),
        migrations.AlterField(
            model_name="destination",
            name="url_key",
            field=models.CharField(max_length=32, unique=True),
        ),
        migrations.AlterField(
            model_name="endpoint",
            name="key",
            field=models.CharField(max_length=32, unique=True),
        ),
        migrations.AlterModelOptions(
            name="endpoint",
            options={"ordering": ["url_display", "key"]},
        ),
    ]
