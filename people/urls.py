from django.urls import path

from people import page, views

app_name = "people"

urlpatterns = [
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
    path("me/<str:token>/", page.person_page, name="page"),
    path("me/<str:token>/my-data.json", page.person_export, name="export"),
]
