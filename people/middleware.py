"""The headers every answer of the people's pages carries, whichever part of Django made it."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

# Where config/urls.py mounts people.urls.
PREFIX = "/p/"

PRIVATE_PAGE_HEADERS = {
    # A page about one person, opened by a link that is their key: no cache (a proxy, the
    # browser's disk, the back button on a shared computer) keeps a copy.
    "Cache-Control": "no-store",
    # The link is in the address: no page it leads to learns it.
    "Referrer-Policy": "no-referrer",
    # Never in a search engine, whoever posts the link somewhere.
    "X-Robots-Tag": "noindex",
}


class PrivatePageHeadersMiddleware:
    """Sets PRIVATE_PAGE_HEADERS on every response under /p/: the pages, their 404 and 429, and
    CsrfViewMiddleware's 403, which no view of the app sees. Placed after SecurityMiddleware, whose
    Referrer-Policy then does not replace this one (it only sets one where none is)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith(PREFIX):
            for header, value in PRIVATE_PAGE_HEADERS.items():
                response[header] = value
        return response
