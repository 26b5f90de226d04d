"""The committed catalogues: every string of the people's pages has its German, and the .mo says what the .po does."""

from __future__ import annotations

import ast
import gettext
from pathlib import Path

from django.conf import settings

PO = Path(settings.BASE_DIR) / "locale" / "de" / "LC_MESSAGES" / "django.po"


def po_entries(path: Path) -> dict[tuple[str | None, str], str]:
    """(context, msgid) -> msgstr of a .po as makemessages writes it (no plurals), less its header."""
    entries: dict[tuple[str | None, str], str] = {}
    entry: dict[str, list[str]] = {}
    word = ""
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if line.startswith(("msgctxt ", "msgid ", "msgstr ")):
            word, _, literal = line.partition(" ")
            entry[word] = [ast.literal_eval(literal)]
        elif line.startswith('"'):
            entry[word].append(ast.literal_eval(line))
        elif not line.strip() and entry:
            msgid = "".join(entry["msgid"])
            if msgid:
                context = "".join(entry["msgctxt"]) if "msgctxt" in entry else None
                entries[(context, msgid)] = "".join(entry["msgstr"])
            entry = {}
    return entries


def test_every_string_has_its_german_and_the_committed_mo_says_the_same():
    entries = po_entries(PO)
    compiled = gettext.GNUTranslations(PO.with_suffix(".mo").open("rb"))

    assert len(entries) > 40
    assert [msgid for (_context, msgid), msgstr in entries.items() if not msgstr] == []
    for (context, msgid), msgstr in entries.items():
        said = compiled.pgettext(context, msgid) if context else compiled.gettext(msgid)
        assert said == msgstr, msgid
