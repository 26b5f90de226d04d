"""The console's admin site: Django's admin with the operations titles and a dashboard page."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.urls import path

from console.dashboard import dashboard_view

TITLE = "Birthday scheduler operations"
# The dashboard summarises events and deliveries, so it shows to whoever may read both.
DASHBOARD_PERMISSIONS = ("scheduling.view_event", "delivery.view_delivery")


class ConsoleAdminSite(admin.AdminSite):
    site_header = TITLE
    site_title = TITLE
    index_title = TITLE

    def get_urls(self):
        return [
            path("dashboard/", self.admin_view(self.dashboard), name="dashboard"),
            *super().get_urls(),
        ]

    def each_context(self, request):
        return {**super().each_context(request), "can_view_dashboard": self.can_view_dashboard(request)}

    def can_view_dashboard(self, request) -> bool:
        return request.user.has_perms(DASHBOARD_PERMISSIONS)

    def dashboard(self, request):
        if not self.can_view_dashboard(request):
            raise PermissionDenied
        return dashboard_view(request, site=self)
