import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient


@pytest.fixture
def operator(db):
    return get_user_model().objects.create_user(username="operator", password="s3cret-pass!")


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


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    # The real hasher costs ~0.25 s per operator created; tests do not need its strength.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def pytest_configure(config):
    # WhiteNoise serves STATIC_ROOT and warns on every request when a fresh
    # clone has not run collectstatic yet; the tests do not need the files.
    settings.STATIC_ROOT.mkdir(parents=True, exist_ok=True)
