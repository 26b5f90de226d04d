"""Languages of messages: what a language tag is, and which templates stand in for a language without its own.

A recipient's language (users.validators takes it by these rules) and a
template's (scheduling.models.MessageTemplate) are BCP 47 tags (RFC 5646) of
the shape messages need: a language (2-3 letters), optionally a script (4
letters) and a region (2 letters or 3 digits), e.g. de, pt-BR, zh-Hant-TW,
es-419, each written in its usual case. Extensions and private-use subtags
are refused: no template could be chosen by them. Whether a language exists
is not checked (no list of languages ships with the product): a well-formed
tag without templates of its own simply falls back to the default.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError

LANGUAGE_MAX_LENGTH = 35
_LANGUAGE = re.compile(r"^([a-z]{2,3})(?:-([a-z]{4}))?(?:-([a-z]{2}|[0-9]{3}))?$", re.IGNORECASE)


def clean_language(value: object) -> str:
    """A language as a BCP 47 tag in its usual case (pt-br → pt-BR); "" or None: none (the default)."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError("Language must be a string, such as de or pt-BR.")
    tag = value.strip()
    if not tag:
        return ""
    match = _LANGUAGE.fullmatch(tag) if len(tag) <= LANGUAGE_MAX_LENGTH else None
    if match is None:
        raise ValidationError(
            f"{tag!r} is not a language tag (BCP 47): a language, optionally a script and a region, "
            "such as de, pt-BR or zh-Hant-TW."
        )
    language, script, region = match.groups()
    return "-".join(
        part for part in (language.lower(), script and script.title(), region and region.upper()) if part
    )


def language_fallbacks(language: str) -> list[str]:
    """The tags a message in `language` may be written in, most specific first, ending with "" (the default).

    zh-Hant-TW → zh-Hant-TW, zh-Hant, zh, "": each subtag dropped from the end (RFC 4647's lookup).
    """
    parts = language.split("-") if language else []
    return ["-".join(parts[:n]) for n in range(len(parts), 0, -1)] + [""]
