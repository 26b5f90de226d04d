from django.urls import path

from people import page

app_name = "people"

urlpatterns = [
    path("me/<str:token>/", page.person_page, name="page"),
    path("me/<str:token>/my-data.json", page.person_export, name="export"),
]
