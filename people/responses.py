"""What every page of a person carries: never cached, never sent on as a referrer, never indexed.

The link in the address bar is the person's credential: a shared proxy, a search engine or the
next site's Referer must never see it or what it shows.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils import translation

from scheduling.languages import language_fallbacks

# The languages the person-facing pages are written in (locale/); any other falls back to English.
PAGE_LANGUAGES = ("en", "de")

PRIVATE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Robots-Tag": "noindex, nofollow",
}


def page_language(language: str) -> str:
    """The language a page for a person of `language` is shown in: theirs or its base, else English."""
    for tag in language_fallbacks(language):
        if tag.lower() in PAGE_LANGUAGES:
            return tag.lower()
    return "en"


def private_page(
    request: HttpRequest, *, template: str, context: dict[str, object], language: str, status: int = 200
) -> HttpResponse:
    """Render `template` in the person's language with the private headers."""
    shown = page_language(language)
    with translation.override(shown):
        body = render_to_string(template, {**context, "page_language": shown}, request=request)
    response = HttpResponse(body, status=status)
    for name, value in PRIVATE_HEADERS.items():
        response[name] = value
    return response


def not_found() -> HttpResponse:
    """The one 404 of every person's page: the same for a wrong, expired or revoked link and an erased person."""
    response = HttpResponse("Not found.\n", status=404, content_type="text/plain; charset=utf-8")
    for name, value in PRIVATE_HEADERS.items():
        response[name] = value
    return response
