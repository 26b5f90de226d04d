"""The console's index and sidebar: an operator's daily pages first, the plumbing last."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db

# Every app the console shows a superuser, in the order it shows them.
OPERATOR_APPS_THEN_PLUMBING = [
    ("users", "Recipients"),
    ("scheduling", "Scheduling"),
    ("delivery", "Delivery"),
    ("auth", "Operators: accounts and permissions"),
    ("authtoken", "Auth Token"),
    ("axes", "Axes"),
]


def shown_apps(app_list: list[dict]) -> list[tuple[str, str]]:
    return [(app["app_label"], app["name"]) for app in app_list]


def test_the_index_lists_recipients_scheduling_and_delivery_before_accounts_tokens_and_axes(console):
    response = console.get(reverse("admin:index"))

    assert shown_apps(response.context["app_list"]) == OPERATOR_APPS_THEN_PLUMBING
    # As the page shows them, each app's caption in turn (admin/app_list.html).
    captions = re.findall(r'title="Models in the (.+?) application"', response.content.decode())
    assert captions == [name for _, name in OPERATOR_APPS_THEN_PLUMBING]


def test_the_sidebar_of_every_page_lists_the_apps_in_the_same_order(console):
    response = console.get(reverse("admin:scheduling_event_changelist"))

    assert shown_apps(response.context["available_apps"]) == OPERATOR_APPS_THEN_PLUMBING


def test_an_apps_own_page_lists_its_models_by_name_as_django_does(console):
    response = console.get(reverse("admin:app_list", args=["delivery"]))

    (delivery,) = response.context["app_list"]
    assert [model["object_name"] for model in delivery["models"]] == ["Delivery", "Destination", "Endpoint"]


ADMIN_CHECKS = """
import django
django.setup()
from django.contrib import admin
from django.core import checks
errors = checks.run_checks(tags=[checks.Tags.admin])
print(len(errors), admin.site.is_registered(__import__("users.models").models.User))
"""


@pytest.mark.slow
def test_the_admin_checks_find_the_model_admins_in_a_process_that_loaded_no_urls():
    # ModelAdmins are found when first needed (console.apps), and the checks run in no set order: in a
    # fresh process whose URLconf is not loaded, the admin's checks must still see every ModelAdmin.
    checked = subprocess.run(
        [sys.executable, "-c", ADMIN_CHECKS],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.split() == ["0", "True"]
