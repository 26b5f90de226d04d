import os
import subprocess
from ipaddress import ip_network

import hypothesis
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db.models import Q
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

# The delivery pipeline's fixtures (a real local receiver, the settings that point at it) serve
# the tests of every wing of delivery/ and of the apps that read it.
pytest_plugins = ["delivery.tests.pipeline"]

# How hard the property tests try. make test runs the "suite" profile: 25 generated
# examples per test and, for the API's schema test, schemathesis's coverage cases (every
# boundary and wrong type the schema implies). make check, the loop run while working, sets
# SUITE_PROFILE=check: 5 generated examples and no coverage cases (users/tests/test_openapi.py).
SUITE_PROFILE = os.environ.get("SUITE_PROFILE", "suite")
hypothesis.settings.register_profile("suite", max_examples=25)
hypothesis.settings.register_profile("check", max_examples=5)
hypothesis.settings.load_profile(SUITE_PROFILE)

# What an API operator account is granted: every recipient permission and reading events.
OPERATOR_PERMISSIONS = (
    "users.view_user",
    "users.add_user",
    "users.change_user",
    "users.delete_user",
    "scheduling.view_event",
    "delivery.view_destination",
    "delivery.add_destination",
    "delivery.change_destination",
    "delivery.delete_destination",
)


def permissions_named(*names: str):
    query = Q(pk__in=[])
    for name in names:
        app_label, codename = name.split(".")
        query |= Q(content_type__app_label=app_label, codename=codename)
    return Permission.objects.filter(query)


@pytest.fixture
def default_destination(settings):
    """WEBHOOK_URL set, so the claim seeds the default destination (at a receiver nobody listens at)."""
    settings.WEBHOOK_URL = "https://hooks.example.org/birthdays"
    return settings.WEBHOOK_URL


@pytest.fixture
def operator(db):
    account = get_user_model().objects.create_user(username="operator", password="s3cret-pass!")
    account.user_permissions.set(permissions_named(*OPERATOR_PERMISSIONS))
    return account


@pytest.fixture
def api_client(operator) -> APIClient:
    """An API client authenticated with a DRF token."""
    token = Token.objects.create(user=operator)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def console(client, django_user_model):
    """A test client logged in to the admin as a superuser operator."""
    operator = django_user_model.objects.create_superuser(username="ops-alice", password="unused-Pass-1!")
    client.force_login(operator)
    return client


@pytest.fixture
def anonymous_client() -> APIClient:
    return APIClient()


# make check leaves these out (pytest.ini): what starts processes, servers of its own or a browser.
MARKERS_OF_PROCESS_TESTS = ("slow", "browser")


@pytest.fixture(autouse=True)
def only_marked_tests_start_processes(request, monkeypatch):
    """Refuse a process to a test without one of MARKERS_OF_PROCESS_TESTS.

    make check runs in parallel and must stay quick, and it can only leave out the
    tests that say what they do; one that starts a process unmarked fails here at
    once instead of slowing or upsetting the fast loop unnoticed. Session fixtures
    (the older tzdata's one-off pip install) are set up before this one and keep
    their processes.
    """
    if any(request.node.get_closest_marker(name) for name in MARKERS_OF_PROCESS_TESTS):
        return

    def refuse(self, args, *more, **options):
        raise AssertionError(
            f"{request.node.nodeid} starts a process ({args!r}): mark it slow, which make check leaves out"
        )

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


@pytest.fixture(autouse=True)
def no_product_process_outlives_its_test(request, monkeypatch):
    """Kill a manage.py process a test left running, and fail that test.

    A scheduler or worker left behind keeps working on the shared test database
    under the next tests, and sends to whatever now listens on its old receiver's
    port, often the next test's sink: deliveries that test never made would arrive
    twice there. Fixtures end their own processes before this runs.
    """
    if not any(request.node.get_closest_marker(name) for name in MARKERS_OF_PROCESS_TESTS):
        yield
        return
    started = []
    start = subprocess.Popen.__init__

    def record(self, args, *more, **options):
        start(self, args, *more, **options)
        if any(
            str(arg).endswith("manage.py") for arg in (args if isinstance(args, list | tuple) else [args])
        ):
            started.append(self)

    monkeypatch.setattr(subprocess.Popen, "__init__", record)
    yield
    left = [process for process in started if process.poll() is None]
    for process in left:
        process.kill()
        process.wait()
    assert not left, f"{request.node.nodeid} left running: {[process.args for process in left]}"


# The suite's receivers (the sinks, PgBouncer's neighbours, 127.0.0.1:9) listen on loopback over plain
# http, which the product refuses by default (delivery/receivers/addresses.py): every test allows
# them as `make run` does, and process_env (delivery/tests/pipeline.py) hands the allowance on to
# the processes a test starts. A test of the refusals sets its own policy.
LOCAL_RECEIVER_NETWORKS = ("127.0.0.0/8", "::1/128")


@pytest.fixture(autouse=True)
def local_receivers_allowed(settings):
    settings.WEBHOOK_ALLOW_HTTP = True
    settings.WEBHOOK_ALLOWED_NETWORKS = [ip_network(network) for network in LOCAL_RECEIVER_NETWORKS]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The real hasher is slow on purpose, and every operator created pays it;
    # tests do not need its strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_configure(config):
    # WhiteNoise serves STATIC_ROOT and warns on every request when a fresh
    # clone has not run collectstatic yet; the tests do not need the files.
    settings.STATIC_ROOT.mkdir(parents=True, exist_ok=True)


@pytest.fixture
def production_plan():
    """EXPLAIN what a production function actually runs: `plan(fn, containing)` -> (sql, plan).

    `fn` runs once inside a transaction that is rolled back; the first statement
    it executed that contains `containing` is captured (with its parameters
    bound, as PostgreSQL received it) and EXPLAINed, with sequential scans
    forbidden if a tiny test table made one look cheaper, and the planner
    settings in `forbidden` turned off.
    """
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    def plan(fn, containing: str, *, forbidden: tuple[str, ...] = ()) -> tuple[str, str]:
        with transaction.atomic():
            with CaptureQueriesContext(connection) as captured:
                fn()
            transaction.set_rollback(True)
        sql = next(q["sql"] for q in captured.captured_queries if containing in q["sql"])
        with transaction.atomic(), connection.cursor() as cursor:
            for setting in forbidden:
                cursor.execute(f"SET LOCAL {setting} = off")
            cursor.execute("EXPLAIN " + sql)
            text = "\n".join(row[0] for row in cursor.fetchall())
            if "Seq Scan" in text:
                cursor.execute("SET LOCAL enable_seqscan = off")
                cursor.execute("EXPLAIN " + sql)
                text = "\n".join(row[0] for row in cursor.fetchall())
            transaction.set_rollback(True)
        return sql, text

    return plan
