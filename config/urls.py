from django.conf import settings
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path(settings.ADMIN_URL, admin.site.urls),
    path("api/v1/", include("users.urls")),
    path("", RedirectView.as_view(url=f"/{settings.ADMIN_URL}", permanent=False)),
]
