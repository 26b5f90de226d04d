"""The console's action issuing links to the people's own pages: shown once, each ending the one before."""

import pytest
from django.test import Client
from django.urls import reverse

from users.models import PersonalLink
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_action_shows_each_link_once_and_the_earlier_link_is_dead(console):
    ada, bob = UserFactory(first_name="Ada"), UserFactory(first_name="Bob")
    changelist = reverse("admin:users_user_changelist")

    def issue() -> dict[str, str]:
        response = console.post(
            changelist, {"action": "issue_personal_link", "_selected_action": [str(ada.pk), str(bob.pk)]}
        )
        assert response.status_code == 200
        assert "no-store" in response["Cache-Control"]
        return {user.first_name: link.url for user, link in response.context["issued"]}

    first = issue()
    second = issue()

    page = Client()
    path = lambda url: url.removeprefix("http://127.0.0.1:8000")  # noqa: E731
    assert page.get(path(second["Ada"])).status_code == 200
    assert page.get(path(second["Bob"])).status_code == 200
    assert page.get(path(first["Ada"])).status_code == 404
    assert set(PersonalLink.objects.values_list("issued_by", "actor").distinct()) == {
        ("operator", "ops-alice")
    }
    # Shown once: nothing the console keeps (its log, its messages) holds the link.
    assert second["Ada"] not in console.get(changelist).content.decode()
