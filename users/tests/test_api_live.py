"""The API under gunicorn, as deployed: real sockets, real threads, real concurrent requests."""

import os
import threading
from pathlib import Path

import pytest
from django.db import connection
from rest_framework.authtoken.models import Token

from devtools.suite_database import database_url
from users.models import User
from users.tests.factories import UserFactory
from users.tests.live_api import api_server, request

BASE_DIR = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def gunicorn(tmp_path):
    """The web server as the README deploys it (4 workers x 6 threads), on this test's database."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(connection.settings_dict),
        "PYTHONUNBUFFERED": "1",
    }
    with api_server(env=env, log_path=tmp_path / "gunicorn.log", workers=4, threads=6) as port:
        yield port


def test_two_concurrent_patches_of_different_fields_both_stand(gunicorn, operator):
    token = Token.objects.create(user=operator).key
    lost = []
    for round_number in range(30):
        user = UserFactory(first_name="Ada", timezone="UTC")
        start = threading.Barrier(2)
        statuses = []

        def patch(fields, start=start, user=user, statuses=statuses):
            start.wait()
            statuses.append(request(gunicorn, token, "PATCH", f"/api/v1/users/{user.id}/", fields)[0])

        threads = [
            threading.Thread(target=patch, args=({"first_name": f"Name{round_number}"},)),
            threading.Thread(target=patch, args=({"timezone": "Asia/Tokyo"},)),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert statuses == [200, 200]
        stored = User.objects.get(pk=user.pk)
        if (stored.first_name, stored.timezone, stored.version) != (f"Name{round_number}", "Asia/Tokyo", 3):
            lost.append((round_number, stored.first_name, stored.timezone, stored.version))

    assert lost == []


def test_two_clients_with_the_same_if_match_one_wins_the_other_gets_412(gunicorn, operator):
    token = Token.objects.create(user=operator).key
    user = UserFactory(first_name="Ada", timezone="UTC")
    start = threading.Barrier(2)
    statuses = []

    def patch(fields):
        start.wait()
        statuses.append(
            request(
                gunicorn, token, "PATCH", f"/api/v1/users/{user.id}/", fields, headers={"If-Match": '"1"'}
            )[0]
        )

    threads = [
        threading.Thread(target=patch, args=({"first_name": "Grace"},)),
        threading.Thread(target=patch, args=({"timezone": "Asia/Tokyo"},)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == [200, 412]
    stored = User.objects.get(pk=user.pk)
    assert stored.version == 2
    assert (stored.first_name == "Grace") != (stored.timezone == "Asia/Tokyo")


@pytest.mark.parametrize("method", ["POST", "PATCH", "PUT"])
def test_a_chunked_body_is_refused_with_411_and_changes_nothing(gunicorn, operator, method):
    token = Token.objects.create(user=operator).key
    user = UserFactory(first_name="Ada", timezone="UTC")
    body = {
        "first_name": "Grace",
        "last_name": "Hopper",
        "date_of_birth": "1990-05-05",
        "timezone": "Asia/Tokyo",
    }
    path = "/api/v1/users/" if method == "POST" else f"/api/v1/users/{user.id}/"

    status, _, payload = request(gunicorn, token, method, path, body, chunked=True)

    assert status == 411, payload
    assert list(User.objects.values_list("first_name", "timezone", "version")) == [("Ada", "UTC", 1)]
