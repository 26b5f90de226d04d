"""The long-running commands' shared part (runtime.commands): what a start costs before the loop runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from devtools.suite_database import database_url

BASE_DIR = Path(__file__).resolve().parents[2]

STARTS = """
import os, sys
import django
django.setup()
from django.conf import settings
from django.core import checks
from django.core.management import call_command
checked = []
run_checks = checks.run_checks
def recorded(*args, **kwargs):
    checked.extend(kwargs["tags"])
    return run_checks(*args, **kwargs)
checks.run_checks = recorded
# As manage.py runs it: call_command leaves the checks out unless asked.
call_command(sys.argv[1], "--once", skip_checks=False)
print(settings.ROOT_URLCONF in sys.modules, "rest_framework.views" in sys.modules, ",".join(sorted(checked)))
# Nor the console (found when the admin site is asked for its URLs: console.apps), nor what only the
# web's pages and the ESPs' webhooks use.
print(*(name in sys.modules for name in ("console.site", "console.admin", "icalendar", "requests")))
"""


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", ["run_worker", "run_scheduler"])
def test_a_process_starts_without_importing_the_web_to_check_it(command):
    # The URL checks import the URLconf, the API and the console: a good part of a worker's time to its first
    # delivery, for a process that serves no request. The checks of what it uses still run.
    url = database_url(connection.settings_dict)
    started = subprocess.run(
        [sys.executable, "-c", STARTS, command],
        cwd=BASE_DIR,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert started.returncode == 0, started.stderr
    assert started.stdout.split() == [
        "False", "False", "caches,compatibility,database,models", "False", "False", "False", "False",
    ]  # fmt: skip
