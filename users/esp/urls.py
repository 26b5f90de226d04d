"""/esp/<esp>/tracking/: where each ESP posts its bounces and complaints (mounted in config.urls)."""

from django.urls import path

from users.esp.views import VIEWS, esp_tracking

app_name = "esp"
urlpatterns = [path(f"{esp}/tracking/", esp_tracking, {"esp": esp}, name=f"{esp}_tracking") for esp in VIEWS]
