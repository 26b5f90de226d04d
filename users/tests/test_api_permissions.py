"""The API grants what Django's model permissions grant, and nothing more."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from conftest import permissions_named
from scheduling.models import Event
from users.models import User
from users.tests.factories import UserFactory

USERS_URL = "/api/v1/users/"

pytestmark = pytest.mark.django_db


def client_for(*permissions: str, is_staff: bool = False, is_superuser: bool = False) -> APIClient:
    account = get_user_model().objects.create_user(
        username=f"account-{len(permissions)}-{is_staff}-{is_superuser}",
        password="unused-Pass-1!",
        is_staff=is_staff,
        is_superuser=is_superuser,
    )
    account.user_permissions.set(permissions_named(*permissions))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=account).key}")
    return client


def new_recipient() -> dict:
    return {"first_name": "Ada", "last_name": "Lovelace", "date_of_birth": "1990-05-05", "timezone": "UTC"}


def requests_for(user_id) -> dict[str, tuple]:
    detail = f"{USERS_URL}{user_id}/"
    return {
        "list": ("get", USERS_URL, None),
        "read": ("get", detail, None),
        "events": ("get", f"{detail}events/", None),
        "create": ("post", USERS_URL, new_recipient()),
        "replace": ("put", detail, {**new_recipient(), "first_name": "Mallory"}),
        "patch": ("patch", detail, {"first_name": "Mallory"}),
        "delete": ("delete", detail, None),
    }


def snapshot() -> tuple:
    return (
        list(User.objects.order_by("id").values_list("id", "first_name")),
        list(Event.objects.order_by("id").values_list("id", "status", "occurrence_date")),
    )


def call(client: APIClient, request: tuple):
    method, url, payload = request
    return getattr(client, method)(url, payload, format="json")


@pytest.mark.parametrize("is_staff", [False, True])
@pytest.mark.parametrize("what", ["list", "read", "events", "create", "replace", "patch", "delete"])
def test_an_account_without_model_permissions_is_refused_with_403_and_changes_nothing(is_staff, what):
    user = UserFactory(first_name="Grace")
    client = client_for(is_staff=is_staff)
    before = snapshot()

    response = call(client, requests_for(user.id)[what])

    assert response.status_code == 403, response.content
    assert "permission" in response.json()["detail"]
    assert snapshot() == before


@pytest.mark.parametrize(
    "permissions, allowed",
    [
        (("users.view_user",), {"list", "read"}),
        (("users.view_user", "scheduling.view_event"), {"list", "read", "events"}),
        (("users.add_user",), {"create"}),
        (("users.change_user",), {"replace", "patch"}),
        (("users.delete_user",), {"delete"}),
    ],
)
def test_each_permission_opens_exactly_its_own_requests(permissions, allowed):
    user = UserFactory(first_name="Grace")
    client = client_for(*permissions)

    outcomes = {
        what: call(client, request).status_code
        for what, request in requests_for(user.id).items()
        if what != "delete"
    }
    outcomes["delete"] = call(client, requests_for(user.id)["delete"]).status_code

    assert {what for what, status in outcomes.items() if status != 403} == allowed
    assert all(status < 300 for what, status in outcomes.items() if what in allowed), outcomes


def test_a_superuser_may_do_everything():
    user = UserFactory(first_name="Grace")
    client = client_for(is_superuser=True)

    statuses = [call(client, request).status_code for request in requests_for(user.id).values()]

    assert statuses == [200, 200, 200, 201, 200, 200, 204]


def test_the_dashboard_needs_permission_to_view_events_and_deliveries(client, django_user_model):
    staff = django_user_model.objects.create_user(username="staff", password="unused-Pass-1!", is_staff=True)
    client.force_login(staff)

    assert client.get("/admin/dashboard/").status_code == 403
    assert b"Dashboard" not in client.get("/admin/").content

    staff.user_permissions.set(permissions_named("scheduling.view_event", "delivery.view_delivery"))

    assert client.get("/admin/dashboard/").status_code == 200
    assert b"Dashboard" in client.get("/admin/").content
