"""The console's admin site: Django's admin with the operations titles and a dashboard page."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from console.dashboard import dashboard_view

TITLE = "Birthday scheduler operations"


class ConsoleAdminSite(admin.AdminSite):
    site_header = TITLE
    site_title = TITLE
    index_title = TITLE

    def get_urls(self):
        return [
            path("dashboard/", self.admin_view(self.dashboard), name="dashboard"),
            *super().get_urls(),
        ]

    def dashboard(self, request):
        return dashboard_view(request, site=self)
