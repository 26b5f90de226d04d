"""A destination's `url_display` shows all of its URL but the part its kind knows is the credential.

Until now every receiver URL was shown by its host only. Each destination's
display (and its endpoint's, a copy) is recomputed from its decrypted URL and its
format by the kind's `shown_url` (channels): a Slack webhook is shown as
`https://hooks.slack.com/services/T…/B…/…`, a standard one by its host as before.

The kinds' code of today is used on purpose, not a frozen copy: the column holds
what the kinds show, and channels imports no app, so it imports here as it does
at run time. A URL no key of WEBHOOK_SECRET_KEYS opens (a key dropped too soon)
keeps its host-only form rather than stopping the migration: that form never
shows more than the new one, the key's absence is the operator's to fix (the
worker cannot send to that URL either), and the next change of the destination's
URL or format shows it in full form. An endpoint no destination has (its
deliveries still to finish after a URL change) keeps its form: its kind is not
known.

Reversed, every display goes back to its host only, which the shown form begins
with, so nothing needs decrypting.
"""

from django.core.exceptions import ImproperlyConfigured
from django.db import migrations

from kinds import kind_for
from kinds.base import host_only
from delivery.credentials.receiver_urls import url_decrypt


def forward(apps, schema_editor):
    Destination = apps.get_model("delivery", "Destination")
    Endpoint = apps.get_model("delivery", "Endpoint")
    # Only the columns read: beside other branches' migrations the state may hold columns not yet there.
    for destination in Destination.objects.only("pk", "url_ciphertext", "url_key", "format"):
        try:
            url = url_decrypt(destination.url_ciphertext)
        except ImproperlyConfigured:
            continue
        shown = kind_for(destination.format).shown_url(url)
        Destination.objects.filter(pk=destination.pk).update(url_display=shown)
        Endpoint.objects.filter(key=destination.url_key).update(url_display=shown)


def backward(apps, schema_editor):
    for model in (apps.get_model("delivery", "Destination"), apps.get_model("delivery", "Endpoint")):
        for row in model.objects.only("pk", "url_display"):
            model.objects.filter(pk=row.pk).update(url_display=host_only(row.url_display))


class Migration(migrations.Migration):
    dependencies = [
        ("delivery", "0019_merge_digests_urlcreds"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
