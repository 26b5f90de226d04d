"""The console's admin site: Django's admin with the operations titles and a dashboard page."""

from __future__ import annotations

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.urls import path

from console.dashboard import dashboard_view
from console.failures import failures_view
from console.upcoming import upcoming_view

TITLE = "Birthday scheduler operations"
# The dashboard summarises events and deliveries, so it shows to whoever may read both.
DASHBOARD_PERMISSIONS = ("scheduling.view_event", "delivery.view_delivery")
# The apps on the index and in the sidebar, by app label: an operator's daily
# pages first, in the order the work flows (recipients, their events, what was
# sent), then the plumbing (the operators' own accounts, API tokens, login
# lock-outs). Django's own order is by name, which puts the plumbing first. An
# app not named here would come last; console/tests/test_site.py lists every
# app the console shows, so a new one is placed on purpose.
APP_ORDER = ("users", "scheduling", "delivery", "auth", "authtoken", "axes")


class ConsoleAdminSite(admin.AdminSite):
    site_header = TITLE
    site_title = TITLE
    index_title = TITLE
    # The app list stands on the dashboard instead: beside a list, the sidebar took 275 px of a
    # laptop's 1366 and pushed the key columns out of view.
    enable_nav_sidebar = False

    def get_urls(self):
        # The apps' ModelAdmins, found now rather than at start-up (console.apps.ConsoleAdminConfig).
        admin.autodiscover()
        return [
            path("dashboard/", self.admin_view(self.dashboard), name="dashboard"),
            path("failures/", self.admin_view(self.failures), name="failures"),
            path("upcoming/", self.admin_view(self.upcoming), name="upcoming"),
            *super().get_urls(),
        ]

    def get_app_list(self, request, app_label=None):
        """Django's app list (each app's models still by name), the apps in APP_ORDER, the operators named so."""
        apps = sorted(
            super().get_app_list(request, app_label),
            key=lambda app: _app_position(app_label=app["app_label"]),
        )
        for app in apps:
            if app["app_label"] == "auth":
                # Django calls them Users; here "users" would read as the recipients (the API's /users/).
                app["name"] = "Operators: accounts and permissions"
                for model in app["models"]:
                    if model["object_name"] == "User":
                        model["name"] = "Operators (console accounts)"
        return apps

    def each_context(self, request):
        return {**super().each_context(request), "can_view_dashboard": self.can_view_dashboard(request)}

    def can_view_dashboard(self, request) -> bool:
        return request.user.has_perms(DASHBOARD_PERMISSIONS)

    def index(self, request, extra_context=None):
        """The landing page after login: the dashboard, with every page listed under it.

        Whoever may not read the dashboard gets Django's index of the pages they may use.
        """
        if self.can_view_dashboard(request):
            return dashboard_view(request, site=self, as_index=True)
        return super().index(request, extra_context)

    def failures(self, request):
        return failures_view(request, site=self)

    def upcoming(self, request):
        return upcoming_view(request, site=self)

    def dashboard(self, request):
        if not self.can_view_dashboard(request):
            raise PermissionDenied
        return dashboard_view(request, site=self)


def _app_position(*, app_label: str) -> int:
    return APP_ORDER.index(app_label) if app_label in APP_ORDER else len(APP_ORDER)
