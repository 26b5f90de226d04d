from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the console's site (titles, dashboard) as admin.site."""

    default = False  # named explicitly in INSTALLED_APPS
    default_site = "console.site.ConsoleAdminSite"


class ConsoleConfig(AppConfig):
    """The operator console: recipients, events and deliveries admins and the dashboard."""

    default = True
    name = "console"
    verbose_name = "Operator console"
