"""The headers every answer of the people's pages carries, whichever part of Django made it."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from people.responses import PRIVATE_HEADERS

# Where config/urls.py mounts people.urls.
PREFIX = "/p/"


class PrivatePageHeadersMiddleware:
    """Sets people.responses.PRIVATE_HEADERS on every response under /p/: the pages, their 404 and 429, and
    CsrfViewMiddleware's 403, which no view of the app sees. Placed after SecurityMiddleware, whose
    Referrer-Policy then does not replace this one (it only sets one where none is)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith(PREFIX):
            for header, value in PRIVATE_HEADERS.items():
                response[header] = value
        return response
