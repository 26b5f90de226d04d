"""What an operator sets for production, checked the way Django and the processes check it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Each test starts manage.py or gunicorn as an operator would.
pytestmark = pytest.mark.slow

BASE_DIR = Path(__file__).resolve().parents[2]
STRONG_KEY = "k3Y-" + "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMN"

# The production settings docs/operations.md lists under "Running in production" (besides the database).
README_PRODUCTION_SETTINGS = {
    "DJANGO_DEBUG": "false",
    "DJANGO_SECRET_KEY": STRONG_KEY,
    "DJANGO_ALLOWED_HOSTS": "birthdays.example.com",
    "DJANGO_CSRF_TRUSTED_ORIGINS": "https://birthdays.example.com",
    "DJANGO_SECURE_COOKIES": "true",
    "DJANGO_SECURE_SSL_REDIRECT": "true",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "DJANGO_SECURE_HSTS_PRELOAD": "true",
    "TRUSTED_PROXY_COUNT": "1",
}


def manage(*args: str, tmp_path: Path, **environment: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    # Point the key file somewhere empty unless a test says otherwise, so the
    # developer's own var/secret-key never stands in for what is being tested.
    env["DJANGO_SECRET_KEY_FILE"] = str(tmp_path / "no-such-key")
    env.update(environment)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_deploy_is_clean_with_the_production_settings_the_readme_lists(tmp_path):
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", tmp_path=tmp_path, **README_PRODUCTION_SETTINGS
    )

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.parametrize(
    "key, problem",
    [
        (None, "no secret key is set"),
        ("", "no secret key is set"),
        ("insecure-local-development-key-change-me-in-production", "published default"),
        ("django-insecure-" + "x1y2z3" * 10, "published default"),
        ("short-but-random-8fQ2", "too weak"),
        ("ab" * 40, "too weak"),
    ],
)
def test_with_debug_off_a_missing_default_or_weak_key_stops_start_up_in_one_line(tmp_path, key, problem):
    environment = {"DJANGO_DEBUG": "false"}
    if key is not None:
        environment["DJANGO_SECRET_KEY"] = key

    result = manage("check", tmp_path=tmp_path, **environment)

    assert result.returncode != 0
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: Refusing to start with DJANGO_DEBUG off")
    assert problem in result.stderr
    assert "DJANGO_SECRET_KEY" in result.stderr


def test_a_key_file_is_read_when_no_key_is_in_the_environment(tmp_path):
    key_file = tmp_path / "secret-key"
    key_file.write_text(STRONG_KEY + "\n")

    result = manage("check", tmp_path=tmp_path, DJANGO_DEBUG="false", DJANGO_SECRET_KEY_FILE=str(key_file))

    assert result.returncode == 0, result.stderr


def test_the_web_server_refuses_to_serve_without_a_key(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    env.update(DJANGO_DEBUG="false", DJANGO_SECRET_KEY_FILE=str(tmp_path / "no-such-key"))

    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--bind", "127.0.0.1:0", "config.wsgi"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # gunicorn stops (a worker that cannot load the application halts the
    # master) and its log ends with the reason.
    assert result.returncode != 0
    assert "Refusing to start with DJANGO_DEBUG off: no secret key is set" in result.stderr


def test_debug_on_runs_without_a_key(tmp_path):
    result = manage("check", tmp_path=tmp_path, DJANGO_DEBUG="true")

    assert result.returncode == 0, result.stderr


def test_a_database_url_that_is_not_postgresql_stops_start_up_in_one_line(tmp_path):
    result = manage(
        "check", tmp_path=tmp_path, DJANGO_SECRET_KEY=STRONG_KEY, DATABASE_URL="sqlite:///db.sqlite3"
    )

    assert result.returncode == 1
    assert (
        result.stderr
        == "error: DATABASE_URL must name a PostgreSQL database: postgres://user@host:port/name.\n"
    )


def test_a_receiver_network_that_is_not_cidr_stops_start_up_in_one_line(tmp_path):
    result = manage(
        "check",
        tmp_path=tmp_path,
        DJANGO_SECRET_KEY=STRONG_KEY,
        WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8, 10.0.0.5/8",
    )

    assert result.returncode == 1
    assert result.stderr == (
        "error: WEBHOOK_ALLOWED_NETWORKS: '10.0.0.5/8' is not a network in CIDR form (10.0.0.5/8 has host bits set)\n"
    )
