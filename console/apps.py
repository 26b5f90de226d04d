from django.apps import AppConfig
from django.contrib import admin
from django.contrib.admin import apps as admin_apps
from django.contrib.admin.checks import check_admin_app, check_dependencies
from django.core import checks


class ConsoleAdminConfig(admin_apps.SimpleAdminConfig):
    """django.contrib.admin with the console's site (titles, dashboard) as admin.site.

    Its ModelAdmins are found when first needed, not at every process's start as Django's
    AdminConfig finds them: a worker or a scheduler never serves the console, and importing it
    with its forms and pages slowed each one's start. The site finds them when asked for its
    URLs (console.site.ConsoleAdminSite.get_urls), the admin's checks here.
    """

    default = False  # named explicitly in INSTALLED_APPS
    default_site = "console.site.ConsoleAdminSite"

    def ready(self) -> None:
        # SimpleAdminConfig's two checks, the second after the ModelAdmins are found: checks run
        # in no set order, so it cannot count on the URL check having loaded them first.
        checks.register(check_dependencies, checks.Tags.admin)
        checks.register(_admin_checks, checks.Tags.admin)


def _admin_checks(app_configs, **kwargs):
    admin.autodiscover()
    return check_admin_app(app_configs, **kwargs)


class ConsoleConfig(AppConfig):
    """The operator console: recipients, events and deliveries admins and the dashboard."""

    default = True
    name = "console"
    verbose_name = "Operator console"
