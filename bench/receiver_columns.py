"""The columns that keep each receiver URL given, as the product stores them: `python -m bench.receiver_columns URL...`.

Run with the product's Python and environment (Harness.receiver_columns): the key
and the encryption follow its DJANGO_SECRET_KEY and WEBHOOK_SECRET_KEYS, so the
rows bench/sql.py writes directly are the ones its processes read. Prints one
JSON line: {url: {"url_ciphertext", "url_key", "url_display"}}.
"""

from __future__ import annotations

import json
import os
import sys

import django


def main(urls: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()
    from delivery.credentials.receiver_urls import url_normalise
    from delivery.destinations.services import destination_url_fields

    print(json.dumps({url: destination_url_fields(url=url_normalise(url)) for url in urls}))


if __name__ == "__main__":
    main(sys.argv[1:])
