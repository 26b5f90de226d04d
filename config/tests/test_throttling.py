"""Rate limits and lock-outs apply to the client, seen through the trusted proxies."""

import pytest
from django.contrib.auth import get_user_model
from django.test import RequestFactory
from rest_framework.test import APIClient

from config.client_address import client_address
from config.throttling import AccountThrottle, AnonymousThrottle, FailedAuthenticationThrottle

USERS_URL = "/api/v1/users/"

pytestmark = pytest.mark.django_db


@pytest.fixture
def rates(monkeypatch):
    """Small limits (DRF reads the rates into the classes when they are imported)."""

    def set_rates(**rates: str) -> None:
        for throttle in (AccountThrottle, AnonymousThrottle, FailedAuthenticationThrottle):
            monkeypatch.setattr(throttle, "THROTTLE_RATES", {**throttle.THROTTLE_RATES, **rates})

    return set_rates


def test_an_account_over_its_rate_gets_429_with_retry_after(api_client, rates):
    rates(user="5/minute")

    statuses = [api_client.get(USERS_URL).status_code for _ in range(7)]

    assert statuses == [200] * 5 + [429] * 2
    refused = api_client.get(USERS_URL)
    assert 0 < int(refused["Retry-After"]) <= 60
    assert "throttled" in refused.json()["detail"].lower()


def test_accounts_are_limited_separately(api_client, rates, django_user_model):
    rates(user="2/minute")
    other = APIClient()
    other.force_authenticate(
        django_user_model.objects.create_superuser(username="other", password="x-Pass-123!")
    )

    assert [api_client.get(USERS_URL).status_code for _ in range(3)] == [200, 200, 429]
    assert other.get(USERS_URL).status_code == 200


def test_wrong_tokens_from_one_address_are_refused_with_429_after_the_limit(rates):
    rates(failed_authentication="3/minute")
    guesser = APIClient()

    statuses = [
        guesser.get(USERS_URL, HTTP_AUTHORIZATION=f"Token {index:040d}").status_code for index in range(5)
    ]

    assert statuses == [401, 401, 401, 429, 429]
    assert int(guesser.get(USERS_URL, HTTP_AUTHORIZATION="Token x")["Retry-After"]) > 0


def test_right_tokens_do_not_use_up_the_failure_allowance(api_client, rates):
    rates(failed_authentication="2/minute")

    assert {api_client.get(USERS_URL).status_code for _ in range(10)} == {200}


def test_the_public_schema_is_limited_per_address(rates):
    rates(anon="2/minute")
    client = APIClient()

    statuses = [client.get("/api/v1/schema/").status_code for _ in range(3)]

    assert statuses == [200, 200, 429]


@pytest.mark.parametrize(
    "count, forwarded, expected",
    [
        (0, "203.0.113.9", "10.0.0.2"),  # no trusted proxy: the header could be forged
        (1, "203.0.113.9", "203.0.113.9"),
        (1, "198.51.100.66, 203.0.113.9", "203.0.113.9"),  # the client forged the first entry
        (2, "198.51.100.66, 203.0.113.9, 10.0.0.1", "203.0.113.9"),
        (3, "203.0.113.9", "203.0.113.9"),  # fewer hops than proxies: the left-most
        (1, None, "10.0.0.2"),
    ],
)
def test_the_client_address_is_read_through_exactly_the_trusted_proxies(settings, count, forwarded, expected):
    settings.TRUSTED_PROXY_COUNT = count
    extra = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.2", **extra)

    assert client_address(request) == expected


def test_behind_a_proxy_throttles_count_each_client_not_the_proxy(rates, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    rates(anon="1/minute")
    client = APIClient(REMOTE_ADDR="10.0.0.2")

    first = client.get("/api/v1/schema/", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code
    second_client = client.get("/api/v1/schema/", HTTP_X_FORWARDED_FOR="203.0.113.10").status_code
    first_again = client.get("/api/v1/schema/", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code

    assert (first, second_client, first_again) == (200, 200, 429)


def test_behind_a_proxy_an_attacker_locked_out_of_the_admin_does_not_lock_out_the_operator(client, settings):
    # given one proxy in front and an operator account
    settings.TRUSTED_PROXY_COUNT = 1
    get_user_model().objects.create_superuser(username="ops", password="right-Pass-123!")
    proxy = {"REMOTE_ADDR": "10.0.0.2"}

    # when an attacker behind the same proxy fails five times
    for _ in range(5):
        client.post(
            "/admin/login/",
            {"username": "ops", "password": "wrong"},
            HTTP_X_FORWARDED_FOR="198.51.100.66",
            **proxy,
        )
    attacker = client.post(
        "/admin/login/",
        {"username": "ops", "password": "right-Pass-123!"},
        HTTP_X_FORWARDED_FOR="198.51.100.66",
        **proxy,
    )

    # then the attacker's address is locked out, and the operator's is not
    operator = client.post(
        "/admin/login/",
        {"username": "ops", "password": "right-Pass-123!"},
        HTTP_X_FORWARDED_FOR="203.0.113.9",
        **proxy,
    )
    assert attacker.status_code == 429
    assert operator.status_code == 302
