from django.urls import path

from monitoring import views

urlpatterns = [
    path("health/live", views.live, name="health-live"),
    path("health/ready", views.ready, name="health-ready"),
    path("metrics", views.metrics, name="metrics"),
]
