"""An endpoint's last error kept the receiver's reason phrase or an error text quoting its answer, which may
name a recipient and which no erase reaches: rewritten to what names no one (the status and its standard
phrase, the error's kind), as the workers now write it (delivery.receivers.transport.SendResult)."""

import http
import re

from django.db import migrations

_STATUS = re.compile(r"^HTTP (\d{3})\b")
_KINDS = ("Connection error", "Request failed")


def _names_no_one(last_error: str) -> str:
    status = _STATUS.match(last_error)
    if status:
        code = int(status.group(1))
        try:
            return f"HTTP {code} ({http.HTTPStatus(code).phrase})"
        except ValueError:
            return f"HTTP {code}"
    for kind in _KINDS:
        if last_error.startswith(f"{kind}:"):
            return kind
    return last_error


def forward(apps, schema_editor):
    Endpoint = apps.get_model("delivery", "Endpoint")
    for endpoint in Endpoint.objects.exclude(last_error="").only("id", "last_error"):
        cleaned = _names_no_one(endpoint.last_error)
        if cleaned != endpoint.last_error:
            Endpoint.objects.filter(pk=endpoint.pk).update(last_error=cleaned)


class Migration(migrations.Migration):
    dependencies = [("delivery", "0011_recoveries")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
