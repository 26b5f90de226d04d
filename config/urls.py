from django.conf import settings
from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views.defaults import page_not_found
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

urlpatterns = [
    path(settings.ADMIN_URL, admin.site.urls),
    # The OpenAPI description (YAML; JSON with ?format=json) and Swagger UI reading it.
    # The split view serves Swagger UI's start-up script as a file of its own, so
    # the page still works under a Content-Security-Policy without inline scripts.
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/v1/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="docs"),
    path("api/v1/", include("users.urls")),
    path("api/v1/", include("scheduling.urls")),
    path("api/v1/", include("delivery.api.urls")),
    # The person's own pages, by a signed link: no account, no console.
    path("p/", include("people.urls")),
    # ESPs' bounces and complaints (users/esp/), outside the API: verified as each ESP signs.
    path("esp/", include("users.esp.urls")),
    # /health/live, /health/ready and /metrics, outside the API: no API credentials.
    path("", include("monitoring.urls")),
    path("", RedirectView.as_view(url=f"/{settings.ADMIN_URL}", permanent=False)),
]


def not_found(request, exception):
    """A JSON 404 under /api/, as the API's own 404s are; Django's page elsewhere.

    A path no API route matches at all (an id with a dot in it, which the
    router's patterns refuse) would otherwise get an HTML page that API clients
    cannot parse.
    """
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)


handler404 = not_found
