"""The person's own page through Django's test client: the link, the answers that open nothing, the form."""

from __future__ import annotations

from datetime import date, time, timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from freezegun import freeze_time

from config.throttling import PersonalPageThrottle
from delivery.actions.optouts import destination_opt_out_set, destination_opt_outs_of, unsubscribe_token
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.claim import deliveries_enqueue_due
from delivery.models import Delivery, DeliveryStatus
from people.responses import PRIVATE_HEADERS, not_found, page_language
from scheduling.celebration import ChangedBy
from scheduling.models import Event
from users import services
from users.models import CelebrationChange, CelebrationChoice, PersonalLink, User
from users.selectors import personal_link_user
from users.tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def issue(user: User) -> str:
    """The page's path of a newly issued link."""
    url = services.personal_link_issue(user_id=user.pk, issued_by=ChangedBy.OPERATOR, actor="ops").url
    return url.removeprefix("http://127.0.0.1:8000")


def form_data(page_response, **changes) -> dict:
    """The form as the page rendered it (every field's current value), with `changes`."""
    form = page_response.context["form"]
    data: dict = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if name == "hide_age":
            if value:
                data[name] = "on"
            continue
        data[name] = "" if value is None else value
    data.update(changes)
    return {name: value for name, value in data.items() if value is not False}


def assert_private(response) -> None:
    for header, value in PRIVATE_HEADERS.items():
        assert response[header] == value, header


@pytest.fixture
def ada():
    return UserFactory(
        first_name="Ada",
        last_name="Lovelace",
        date_of_birth=date(1990, 6, 15),
        timezone="Europe/Berlin",
        labels=["team:platform"],
    )


def test_a_link_opens_the_page_of_its_person_with_the_private_headers(client, ada):
    response = client.get(issue(ada))

    assert response.status_code == 200
    assert "Ada" in response.content.decode()
    assert_private(response)
    assert response["Content-Language"] == "en"


def test_the_api_issues_a_link_once_and_a_new_one_revokes_it(api_client, ada):
    first = api_client.post(f"/api/v1/users/{ada.pk}/personal-link/")
    second = api_client.post(f"/api/v1/users/{ada.pk}/personal-link/")

    assert first.status_code == second.status_code == 201
    assert first["Cache-Control"] == "no-store"
    page = Client()
    assert page.get(first.json()["url"].removeprefix("http://127.0.0.1:8000")).status_code == 404
    assert page.get(second.json()["url"].removeprefix("http://127.0.0.1:8000")).status_code == 200
    assert PersonalLink.objects.filter(user=ada).count() == 2


def test_issuing_a_link_needs_the_change_permission(api_client, operator, ada):
    operator.user_permissions.remove(*operator.user_permissions.filter(codename="change_user"))

    response = api_client.post(f"/api/v1/users/{ada.pk}/personal-link/")

    assert response.status_code == 403
    assert not PersonalLink.objects.exists()


def test_wrong_expired_revoked_and_erased_links_get_one_and_the_same_404(client, ada):
    with freeze_time("2026-01-01 12:00"):
        expired = issue(UserFactory())
    revoked = issue(ada)
    current = issue(ada)
    erased_person = UserFactory()
    erased = issue(erased_person)
    services.user_erase(user=erased_person)
    wrong = current[:-3] + ("aaa" if not current.endswith("aaa/") else "bbb") + "/"

    answers = [client.get(path) for path in (wrong, expired, revoked, erased, "/p/me/random-token/")]

    for response in answers:
        assert response.status_code == 404
        assert response.content == not_found().content
        assert_private(response)
    headers = [sorted((k, v) for k, v in r.headers.items() if k != "Date") for r in answers]
    assert all(h == headers[0] for h in headers)
    assert client.get(current).status_code == 200


def test_a_link_expires_after_the_setting(client, settings, ada):
    settings.PERSONAL_LINK_MAX_AGE_DAYS = 2
    with freeze_time("2026-03-01 12:00"):
        path = issue(ada)
    with freeze_time("2026-03-03 11:59"):
        assert client.get(path).status_code == 200
    with freeze_time("2026-03-03 12:01"):
        assert client.get(path).status_code == 404


def test_the_page_speaks_the_persons_language_falling_back_to_its_base_then_english(client, ada):
    assert [page_language(tag) for tag in ("de", "de-AT", "en-GB", "fr", "")] == [
        "de",
        "de",
        "en",
        "en",
        "en",
    ]
    services.user_update(user=ada, data={"language": "de-AT"})

    response = client.get(issue(ada))

    assert response["Content-Language"] == "de"
    body = response.content.decode()
    assert '<html lang="de">' in body
    assert "Wo und wann Ihnen gratuliert wird" in body
    assert "Geburtstag" in body


def test_a_change_through_the_page_is_stored_as_the_persons(client, ada):
    path = issue(ada)
    page = client.get(path)

    response = client.post(
        path,
        form_data(
            page,
            visibility_BIRTHDAY="private",
            hide_age="on",
            language="de",
            send_time="08:30",
            slack_user_id="U0123ABCD",
            mention_consent="yes",
        ),
    )

    assert response.status_code == 302
    ada.refresh_from_db()
    assert (ada.hide_age, ada.language, ada.send_time, ada.slack_user_id, ada.mention_consent) == (
        True,
        "de",
        time(8, 30),
        "U0123ABCD",
        True,
    )
    assert CelebrationChoice.objects.get(user=ada, event_type="BIRTHDAY").visibility == "private"
    assert set(CelebrationChange.objects.filter(user=ada).values_list("changed_by", "actor")) == {
        ("person", "")
    }
    assert client.get(response["Location"]).status_code == 200


@pytest.mark.parametrize(
    ("field", "value", "label"),
    [
        ("slack_user_id", "@ada", "Slack user ID"),
        ("discord_user_id", "adalovelace", "Discord user ID"),
        ("teams_user_id", "ada lovelace@example.com", "Microsoft Teams user"),
        ("visibility_BIRTHDAY", "maybe", "Birthday"),
        ("send_time", "9am", "Send time"),
        ("language", "not a language", "Language"),
    ],
)
def test_bad_input_names_the_field_and_stores_nothing(client, ada, field, value, label):
    path = issue(ada)
    page = client.get(path)
    before = User.objects.values().get(pk=ada.pk)

    # Good changes beside the bad one: none of them is stored either.
    response = client.post(path, form_data(page, hide_age="on", mention_consent="no", **{field: value}))

    assert response.status_code == 400
    assert response.context["form"].errors[field]
    assert f">{label}</a>:" in response.content.decode()
    assert User.objects.values().get(pk=ada.pk) == before
    assert not CelebrationChange.objects.filter(user=ada).exists()
    assert not CelebrationChoice.objects.filter(user=ada).exists()


def test_a_form_posted_without_its_csrf_token_changes_nothing(ada):
    browser = Client(enforce_csrf_checks=True)
    path = issue(ada)
    page = browser.get(path)
    data = form_data(page, hide_age="on")
    data.pop("csrfmiddlewaretoken", None)

    response = browser.post(path, data)

    assert response.status_code == 403
    assert_private(response)
    ada.refresh_from_db()
    assert ada.hide_age is False
    assert browser.post(path, {**data, "csrfmiddlewaretoken": page.context["csrf_token"]}).status_code == 302


def test_an_edit_made_meanwhile_is_not_overwritten(client, ada):
    path = issue(ada)
    page = client.get(path)
    services.user_update(user=ada, data={"language": "fr"})

    response = client.post(path, form_data(page, hide_age="on"))

    assert response.status_code == 409
    ada.refresh_from_db()
    assert (ada.language, ada.hide_age) == ("fr", False)


def test_the_page_shows_where_and_when_they_are_greeted(client, ada):
    destination_create(
        settings=DestinationSettings(name="#general", url="https://general.example.org/hook"), operator="ops"
    )
    destination_create(
        settings=DestinationSettings(
            name="#platform",
            url="https://platform.example.org/hook",
            audience_labels=["team:platform"],
            digest_time=time(10, 0),
            digest_timezone="Europe/Berlin",
        ),
        operator="ops",
    )
    destination_create(
        settings=DestinationSettings(
            name="#data", url="https://data.example.org/hook", audience_labels=["team:data"]
        ),
        operator="ops",
    )

    body = client.get(issue(ada)).content.decode()

    assert "#general" in body and "a message of its own" in body
    assert "#platform" in body and "daily digest" in body and "10:00 your time" in body
    assert "#data" not in body


def test_the_export_downloads_their_data_with_the_links_issued(client, ada):
    path = issue(ada)

    response = client.get(path + "my-data.json")

    assert response.status_code == 200
    assert response["Content-Disposition"] == 'attachment; filename="my-data.json"'
    assert_private(response)
    data = response.json()
    assert data["recipient"]["first_name"] == "Ada"
    assert [link["issued_by"] for link in data["personal_links"]] == ["operator"]
    assert "nonce" not in response.content.decode()


def test_the_page_is_throttled_per_client_with_a_429_page(client, monkeypatch, ada):
    # DRF reads the rates into the class when it is imported.
    rates = {**PersonalPageThrottle.THROTTLE_RATES, "personal_page": "3/minute"}
    monkeypatch.setattr(PersonalPageThrottle, "THROTTLE_RATES", rates)
    # Counts another test's live server left in the cache table (it outlives their transactions).
    cache.clear()
    path = issue(ada)

    answers = [client.get(path).status_code for _ in range(2)] + [client.get("/p/me/wrong/").status_code]
    refused = client.get(path)

    assert answers == [200, 200, 404]
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert_private(refused)
    assert Client(REMOTE_ADDR="10.0.0.9").get(path).status_code == 200


def test_leaving_one_shared_channel_keeps_the_other(client, ada):
    general = destination_create(
        settings=DestinationSettings(name="#general", url="https://general.example.org/hook"), operator="ops"
    ).destination
    platform = destination_create(
        settings=DestinationSettings(
            name="#platform", url="https://platform.example.org/hook", audience_labels=["team:platform"]
        ),
        operator="ops",
    ).destination
    path = issue(ada)
    page = client.get(path)
    assert page.context["form"].initial["announce"] == [general.id, platform.id]

    response = client.post(path, form_data(page, announce=[platform.id]))

    assert response.status_code == 302
    assert destination_opt_outs_of(user_id=ada.pk) == {general.id}
    change = CelebrationChange.objects.get(user=ada, field="destination")
    assert (change.destination_name, change.old_value, change.new_value, change.changed_by) == (
        "#general",
        "in",
        "out",
        "person",
    )
    body = client.get(path).content.decode()
    assert "you left it" in body
    # Back in: ticked again.
    client.post(path, form_data(client.get(path), announce=[general.id, platform.id]))
    assert destination_opt_outs_of(user_id=ada.pk) == set()


def test_a_channel_left_elsewhere_while_the_page_was_open_stays_left(client, ada):
    general = destination_create(
        settings=DestinationSettings(name="#general", url="https://general.example.org/hook"), operator="ops"
    ).destination
    path = issue(ada)
    page = client.get(path)
    # A mail's one-click unsubscribe, after the page was shown with the box ticked.
    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)

    assert client.post(path, form_data(page, hide_age="on")).status_code == 302

    assert destination_opt_outs_of(user_id=ada.pk) == {general.id}


def test_in_german_a_bad_value_is_named_by_its_german_label(client, ada):
    services.user_update(user=ada, data={"language": "de"})
    path = issue(ada)

    response = client.post(path, form_data(client.get(path), slack_user_id="@ada"))

    assert response.status_code == 400
    assert ">Slack-Benutzer-ID</a>:" in response.content.decode()
    assert "Nichts wurde gespeichert" in response.content.decode()


@pytest.mark.parametrize(
    ("origin", "fetch_site", "status"),
    [
        # What a browser sends for the page's own form under its no-referrer policy.
        ("null", "same-origin", 302),
        ("http://testserver", "same-origin", 302),
        # A page elsewhere, even one hiding its origin: refused, token or not.
        ("null", "cross-site", 403),
        ("https://evil.example.org", "cross-site", 403),
    ],
)
def test_the_origin_check_takes_the_null_origin_of_its_own_pages_only(ada, origin, fetch_site, status):
    browser = Client(enforce_csrf_checks=True)
    path = issue(ada)
    page = browser.get(path)

    response = browser.post(
        path,
        {**form_data(page, hide_age="on"), "csrfmiddlewaretoken": page.context["csrf_token"]},
        HTTP_ORIGIN=origin,
        HTTP_SEC_FETCH_SITE=fetch_site,
    )

    assert response.status_code == status
    ada.refresh_from_db()
    assert ada.hide_age is (status == 302)


def test_a_token_signed_for_anything_else_opens_no_page(client, ada):
    general = destination_create(
        settings=DestinationSettings(name="#general", url="https://general.example.org/hook"), operator="ops"
    ).destination
    unsubscribe = unsubscribe_token(user_id=ada.pk, destination_id=general.pk)
    issue(ada)

    assert personal_link_user(token=unsubscribe) is None
    assert client.get(f"/p/me/{unsubscribe}/").content == not_found().content


def test_the_page_says_when_mail_to_their_address_stopped_arriving(client, ada):
    services.user_update(user=ada, data={"email": "ada@example.org", "language": "de"})
    with freeze_time("2026-11-02 10:00"):
        services.recipient_email_undeliverable_mark(email="ada@example.org", reason="550 no such user")

    body = client.get(issue(ada)).content.decode()

    assert "ada@example.org" in body
    assert "E-Mails dorthin werden seit 2026-11-02 nicht zugestellt." in body


def test_not_celebrated_through_the_page_withdraws_what_is_queued_and_leaves_what_is_being_sent(
    client, settings, ada
):
    settings.WEBHOOK_URL = ""
    for name in ("#general", "#platform"):
        destination_create(
            settings=DestinationSettings(name=name, url=f"https://{name[1:]}.example.org/hook"),
            operator="ops",
        )
    Event.objects.update(target_timestamp_utc=Event.objects.filter(user=ada).first().created_at)
    deliveries_enqueue_due()
    sending, queued = Delivery.objects.order_by("destination__name")
    Delivery.objects.filter(pk=sending.pk).update(
        status=DeliveryStatus.SENDING,
        locked_by="worker-1",
        locked_until=timezone.now() + timedelta(minutes=1),
    )
    path = issue(ada)

    response = client.post(path, form_data(client.get(path), visibility_BIRTHDAY="none"))

    assert response.status_code == 302
    assert list(Delivery.objects.values_list("pk", "status")) == [(sending.pk, DeliveryStatus.SENDING)]
