"""Django's CSRF check for the people's forms, with the Origin their own pages make browsers send.

Every page under /p/ is sent with `Referrer-Policy: no-referrer` (people.responses), so a browser
posting one of their forms sends `Origin: null` (the Fetch standard: no origin is told under that
policy) and no Referer: Django's check, which then compares "null" with the site's origin, would
refuse every such post. Here `Origin: null` is taken as this site's when the browser also says the
request comes from this site (`Sec-Fetch-Site: same-origin`, which it sets whatever the policy and
a page cannot forge). Everything else is Django's CsrfViewMiddleware unchanged: the CSRF cookie and
the form's token must match, or the post is refused with 403.
"""

from __future__ import annotations

from django.http import HttpRequest
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.decorators import decorator_from_middleware


class PeopleCsrfViewMiddleware(CsrfViewMiddleware):
    def _origin_verified(self, request: HttpRequest) -> bool:
        if (
            request.META.get("HTTP_ORIGIN") == "null"
            and request.META.get("HTTP_SEC_FETCH_SITE") == "same-origin"
        ):
            return True
        # Django's own method (django-stubs do not declare it).
        return super()._origin_verified(request)  # type: ignore[misc]


# For views exempt from the project's CsrfViewMiddleware (csrf_exempt), which this one replaces.
people_csrf_protect = decorator_from_middleware(PeopleCsrfViewMiddleware)
