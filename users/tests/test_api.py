"""The REST API under /api/v1/: CRUD, authentication, validation and rescheduling."""

import json
import re
import uuid
from datetime import UTC, date, datetime

import pytest
from freezegun import freeze_time

from config.pagination import CountFromPagePaginator
from scheduling.models import Event, EventStatus
from users.models import User
from users.tests.factories import UserFactory

UTC = UTC
USERS_URL = "/api/v1/users/"

pytestmark = pytest.mark.django_db


def detail_url(user_id) -> str:
    return f"{USERS_URL}{user_id}/"


def events_url(user_id) -> str:
    return f"{USERS_URL}{user_id}/events/"


def valid_payload(**overrides) -> dict:
    payload = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-05-05",
        "timezone": "America/New_York",
    }
    payload.update(overrides)
    return payload


def stored_counts() -> tuple[int, int]:
    return User.objects.count(), Event.objects.count()


def pending_events(user) -> list[Event]:
    return list(Event.objects.filter(user=user, status=EventStatus.PENDING))


def only_pending_event(user) -> Event:
    pending = pending_events(user)
    assert len(pending) == 1, f"expected exactly one PENDING event, found {len(pending)}"
    return pending[0]


# --- create ---------------------------------------------------------------------


@freeze_time("2027-01-10T12:00:00Z")
def test_post_creates_user_and_returns_snake_case_fields_with_next_event(api_client):
    # given a valid payload
    # when it is posted
    response = api_client.post(USERS_URL, valid_payload(), format="json")

    # then the user is created and rendered with its first event
    assert response.status_code == 201, response.content
    body = response.json()
    assert uuid.UUID(body["id"])
    assert body["first_name"] == "Ada"
    assert body["last_name"] == "Lovelace"
    assert body["date_of_birth"] == "1990-05-05"
    assert body["timezone"] == "America/New_York"
    assert "created_at" in body and "updated_at" in body
    assert not any(re.search(r"[A-Z]", key) for key in body), "keys must be snake_case"

    event = Event.objects.get(user_id=body["id"])
    assert body["next_event"] == {
        "id": str(event.id),
        "event_type": "BIRTHDAY",
        "status": "PENDING",
        "occurrence_date": "2027-05-05",
        "target_timestamp_utc": "2027-05-05T13:00:00Z",
        "target_timestamp_local": "2027-05-05T09:00:00-04:00",
        "target_timezone": "America/New_York",
        "idempotency_key": event.idempotency_key,
    }


@freeze_time("2027-01-10T12:00:00Z")
def test_post_stores_exactly_one_pending_event_for_the_new_user(api_client):
    # given no users
    assert stored_counts() == (0, 0)

    # when one is created through the API
    response = api_client.post(USERS_URL, valid_payload(), format="json")

    # then the database holds that user and exactly one PENDING event for it
    assert response.status_code == 201
    user = User.objects.get()
    assert str(user.id) == response.json()["id"]
    assert Event.objects.count() == 1
    event = only_pending_event(user)
    assert event.target_timestamp_utc == datetime(2027, 5, 5, 13, 0, tzinfo=UTC)


def test_post_trims_names_before_storing_them(api_client):
    # given names with surrounding whitespace
    payload = valid_payload(first_name="  Ada ", last_name="\tLovelace  ")

    # when posted
    response = api_client.post(USERS_URL, payload, format="json")

    # then they are stored trimmed
    assert response.status_code == 201
    user = User.objects.get()
    assert (user.first_name, user.last_name) == ("Ada", "Lovelace")


# --- read -------------------------------------------------------------------------


def test_list_is_paginated_with_count_next_previous_and_results(api_client):
    # given three users
    users = UserFactory.create_batch(3)

    # when the first page of two is requested
    response = api_client.get(USERS_URL, {"page_size": 2})

    # then it carries the pagination envelope and the oldest two users
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"count", "count_is_lower_bound", "next", "previous", "results"}
    assert (body["count"], body["count_is_lower_bound"]) == (3, False)
    assert body["previous"] is None
    assert body["next"] is not None and "page=2" in body["next"]
    assert [u["id"] for u in body["results"]] == [str(u.id) for u in users[:2]]
    assert all(u["next_event"]["status"] == "PENDING" for u in body["results"])


def test_list_second_page_holds_the_remaining_users(api_client):
    # given three users
    users = UserFactory.create_batch(3)

    # when the second page of two is requested
    body = api_client.get(USERS_URL, {"page_size": 2, "page": 2}).json()

    # then it holds the third user and links back
    assert [u["id"] for u in body["results"]] == [str(users[2].id)]
    assert body["next"] is None
    assert body["previous"] is not None


def test_a_list_longer_than_the_bound_counts_up_to_it_from_the_page_and_says_so(api_client, monkeypatch):
    # given five users, and a count bound lowered so that they are more than it
    users = UserFactory.create_batch(5)
    monkeypatch.setattr(CountFromPagePaginator, "bound", 2)

    # when the pages of one are requested, first, fourth and fifth
    first, fourth, fifth = (api_client.get(USERS_URL, {"page_size": 1, "page": n}).json() for n in (1, 4, 5))

    # then each counts the users up to its end and at most two past it, and says when it stopped short
    assert (first["count"], first["count_is_lower_bound"]) == (3, True)
    assert (fourth["count"], fourth["count_is_lower_bound"]) == (5, False)
    assert (fifth["count"], fifth["count_is_lower_bound"], fifth["next"]) == (5, False, None)
    assert [first["results"][0]["id"], fifth["results"][0]["id"]] == [str(users[0].id), str(users[4].id)]


def test_following_next_reads_every_user_once_though_the_count_is_a_lower_bound(api_client, monkeypatch):
    users = UserFactory.create_batch(5)
    monkeypatch.setattr(CountFromPagePaginator, "bound", 2)

    seen, url = [], f"{USERS_URL}?page_size=2"
    while url:
        body = api_client.get(url).json()
        seen += [u["id"] for u in body["results"]]
        url = body["next"]

    assert seen == [str(u.id) for u in users]


@pytest.mark.parametrize("page", ["3", "last", "0", "x", str(10**30)])
def test_a_page_past_the_end_or_not_a_page_is_404_as_before(api_client, page):
    UserFactory.create_batch(3)

    response = api_client.get(USERS_URL, {"page_size": 2, "page": page})

    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid page."}


def test_get_detail_returns_the_user_and_its_pending_event(api_client):
    # given a user
    user = UserFactory(first_name="Grace", last_name="Hopper")
    event = only_pending_event(user)

    # when it is fetched
    response = api_client.get(detail_url(user.id))

    # then it is rendered with its pending event
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == str(user.id)
    assert (body["first_name"], body["last_name"]) == ("Grace", "Hopper")
    assert body["next_event"]["id"] == str(event.id)
    assert body["next_event"]["idempotency_key"] == event.idempotency_key


# --- update and delete ------------------------------------------------------------------


def test_put_replaces_every_field(api_client):
    # given a user
    user = UserFactory(timezone="Europe/London")

    # when all of its fields are replaced
    payload = valid_payload(
        first_name="Alan", last_name="Turing", date_of_birth="1980-06-23", timezone="Asia/Tokyo"
    )
    response = api_client.put(detail_url(user.id), payload, format="json")

    # then the stored user and the response show the new values
    assert response.status_code == 200, response.content
    user.refresh_from_db()
    assert (user.first_name, user.last_name, user.date_of_birth, user.timezone) == (
        "Alan",
        "Turing",
        date(1980, 6, 23),
        "Asia/Tokyo",
    )
    body = response.json()
    assert body["timezone"] == "Asia/Tokyo"
    assert body["next_event"]["target_timezone"] == "Asia/Tokyo"
    assert body["next_event"]["occurrence_date"].endswith("-06-23")


def test_put_without_every_field_is_refused(api_client):
    # given a user
    user = UserFactory(first_name="Grace")

    # when a PUT leaves fields out
    response = api_client.put(detail_url(user.id), {"first_name": "Alan"}, format="json")

    # then it is refused naming the missing fields and nothing changes
    assert response.status_code == 400
    assert set(response.json()) == {"last_name", "date_of_birth", "timezone"}
    user.refresh_from_db()
    assert user.first_name == "Grace"


def test_patch_changes_only_the_given_field(api_client):
    # given a user
    user = UserFactory(first_name="Grace", last_name="Hopper", timezone="Europe/Paris")

    # when only the last name is patched
    response = api_client.patch(detail_url(user.id), {"last_name": "Murray"}, format="json")

    # then only that field changes
    assert response.status_code == 200, response.content
    user.refresh_from_db()
    assert (user.first_name, user.last_name, user.timezone) == ("Grace", "Murray", "Europe/Paris")
    assert response.json()["last_name"] == "Murray"


def test_delete_removes_the_user_and_cascades_to_its_events(api_client):
    # given a user with a pending event and a past, completed one
    user = UserFactory()
    other = UserFactory()
    pending = only_pending_event(user)
    Event.objects.create(
        user=user,
        event_type=pending.event_type,
        status=EventStatus.COMPLETED,
        occurrence_date=pending.occurrence_date.replace(year=pending.occurrence_date.year - 1),
        target_timestamp_utc=pending.target_timestamp_utc.replace(year=pending.target_timestamp_utc.year - 1),
        target_timestamp_local="x",
        target_timezone=user.timezone,
        idempotency_key="event-completed00000",
    )
    assert Event.objects.filter(user=user).count() == 2

    # when it is deleted
    response = api_client.delete(detail_url(user.id))

    # then it and all its events are gone, and nobody else's
    assert response.status_code == 204
    assert not User.objects.filter(id=user.id).exists()
    assert not Event.objects.filter(user_id=user.id).exists()
    assert Event.objects.filter(user=other).count() == 1
    assert api_client.get(detail_url(user.id)).status_code == 404


def test_events_endpoint_lists_the_users_events_newest_first(api_client):
    # given a user with a pending event and two past ones
    user = UserFactory(date_of_birth=date(1990, 5, 5))
    pending = only_pending_event(user)
    year = pending.occurrence_date.year
    for years_ago, state in ((2, EventStatus.COMPLETED), (1, EventStatus.FAILED)):
        Event.objects.create(
            user=user,
            event_type=pending.event_type,
            status=state,
            occurrence_date=date(year - years_ago, 5, 5),
            target_timestamp_utc=datetime(year - years_ago, 5, 5, 13, tzinfo=UTC),
            target_timestamp_local=f"{year - years_ago}-05-05T09:00:00-04:00",
            target_timezone=user.timezone,
            idempotency_key=f"event-past{years_ago:012d}",
        )
    UserFactory()  # someone else's events must not show up

    # when the user's events are listed
    response = api_client.get(events_url(user.id))

    # then they come newest occurrence first, paginated
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    assert [e["occurrence_date"] for e in body["results"]] == [
        f"{year}-05-05",
        f"{year - 1}-05-05",
        f"{year - 2}-05-05",
    ]
    assert [e["status"] for e in body["results"]] == ["PENDING", "FAILED", "COMPLETED"]
    assert body["results"][0]["id"] == str(pending.id)


def test_events_endpoint_for_an_unknown_user_is_404(api_client):
    assert api_client.get(events_url(uuid.uuid4())).status_code == 404


# --- authentication -----------------------------------------------------------------


def _every_endpoint(user_id):
    return [
        ("get", USERS_URL, None),
        ("post", USERS_URL, valid_payload()),
        ("get", detail_url(user_id), None),
        ("put", detail_url(user_id), valid_payload()),
        ("patch", detail_url(user_id), {"first_name": "Mallory"}),
        ("delete", detail_url(user_id), None),
        ("get", events_url(user_id), None),
    ]


@pytest.mark.parametrize("index", range(7))
def test_every_endpoint_refuses_a_request_without_credentials_with_401(anonymous_client, index):
    # given a user and no credentials
    user = UserFactory(first_name="Grace")
    method, url, payload = _every_endpoint(user.id)[index]
    before = stored_counts()

    # when the endpoint is called
    response = getattr(anonymous_client, method)(url, payload, format="json")

    # then it is 401 and nothing changed
    assert response.status_code == 401
    assert "WWW-Authenticate" in response.headers
    assert stored_counts() == before
    user.refresh_from_db()
    assert user.first_name == "Grace"


@pytest.mark.parametrize("index", range(7))
def test_every_endpoint_refuses_a_bad_token_with_401(operator, index):
    # given a user and a token nobody was given
    user = UserFactory(first_name="Grace")
    method, url, payload = _every_endpoint(user.id)[index]
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    before = stored_counts()

    # when the endpoint is called
    response = getattr(client, method)(url, payload, format="json")

    # then it is 401 and nothing changed
    assert response.status_code == 401
    assert stored_counts() == before
    user.refresh_from_db()
    assert user.first_name == "Grace"


def test_a_logged_in_operators_session_is_accepted_for_reads(anonymous_client, operator):
    # given an operator logged in to a session (the admin console's login)
    user = UserFactory()
    anonymous_client.force_login(operator)

    # when the API is read with that session
    response = anonymous_client.get(detail_url(user.id))

    # then it is served
    assert response.status_code == 200
    assert response.json()["id"] == str(user.id)


def test_a_logged_in_operators_session_is_accepted_for_writes(anonymous_client, operator):
    # given an operator logged in to a session
    anonymous_client.force_login(operator)

    # when a user is created with that session
    response = anonymous_client.post(USERS_URL, valid_payload(), format="json")

    # then it is created
    assert response.status_code == 201
    assert User.objects.count() == 1


def test_session_of_an_operator_who_logged_out_is_refused(anonymous_client, operator):
    # given an operator who logged in and out again
    anonymous_client.force_login(operator)
    anonymous_client.logout()

    # when the API is read
    response = anonymous_client.get(USERS_URL)

    # then it is refused
    assert response.status_code == 401


# --- bad input: 400 and nothing stored ---------------------------------------------------


def assert_refused_and_nothing_stored(api_client, payload, *, bad_fields: set[str]):
    before = stored_counts()
    response = api_client.post(USERS_URL, payload, format="json")
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert set(response.json()) == bad_fields, response.json()
    assert stored_counts() == before
    return response.json()


@pytest.mark.parametrize("field", ["first_name", "last_name"])
@pytest.mark.parametrize("value", ["", "   ", "\t\n"])
def test_blank_or_whitespace_name_is_refused(api_client, field, value):
    assert_refused_and_nothing_stored(api_client, valid_payload(**{field: value}), bad_fields={field})


@pytest.mark.parametrize("field", ["first_name", "last_name"])
def test_name_longer_than_100_characters_after_trimming_is_refused(api_client, field):
    assert_refused_and_nothing_stored(api_client, valid_payload(**{field: "x" * 101}), bad_fields={field})


@pytest.mark.parametrize("field", ["first_name", "last_name"])
def test_name_of_100_characters_padded_with_spaces_is_accepted_and_trimmed(api_client, field):
    # given a 100-character name with surrounding spaces (over 100 before trimming)
    payload = valid_payload(**{field: "   " + "x" * 100 + "   "})

    # when posted
    response = api_client.post(USERS_URL, payload, format="json")

    # then it is accepted and stored trimmed
    assert response.status_code == 201, response.content
    assert getattr(User.objects.get(), field) == "x" * 100


def test_all_missing_fields_are_named(api_client):
    body = assert_refused_and_nothing_stored(
        api_client, {}, bad_fields={"first_name", "last_name", "date_of_birth", "timezone"}
    )
    assert all(body[f] for f in body)


def test_one_missing_field_is_named(api_client):
    payload = valid_payload()
    del payload["timezone"]
    assert_refused_and_nothing_stored(api_client, payload, bad_fields={"timezone"})


def test_several_bad_fields_are_named_together(api_client):
    assert_refused_and_nothing_stored(
        api_client,
        valid_payload(first_name="  ", last_name="y" * 101, timezone="Mars/Olympus_Mons"),
        bad_fields={"first_name", "last_name", "timezone"},
    )


def test_unknown_timezone_is_refused(api_client):
    body = assert_refused_and_nothing_stored(
        api_client, valid_payload(timezone="Europe/Atlantis"), bad_fields={"timezone"}
    )
    assert "Europe/Atlantis" in body["timezone"][0]


@pytest.mark.parametrize("offset", ["+05:00", "UTC+5", "GMT-3", "-0800"])
def test_utc_offset_instead_of_a_zone_is_refused(api_client, offset):
    body = assert_refused_and_nothing_stored(
        api_client, valid_payload(timezone=offset), bad_fields={"timezone"}
    )
    assert "offset" in body["timezone"][0]


@freeze_time("2026-11-22T12:00:00Z")
def test_birth_date_that_is_already_today_in_kiritimati_is_accepted_there(api_client):
    # given it is 2026-11-23 02:00 in Kiritimati (UTC+14) but still the 22nd in UTC
    payload = valid_payload(date_of_birth="2026-11-23", timezone="Pacific/Kiritimati")

    # when a user born "today" there is created
    response = api_client.post(USERS_URL, payload, format="json")

    # then it is accepted and the first birthday is a year later
    assert response.status_code == 201, response.content
    assert response.json()["next_event"]["occurrence_date"] == "2027-11-23"


@freeze_time("2026-11-22T12:00:00Z")
def test_same_birth_date_is_in_the_future_in_new_york(api_client):
    # given it is 2026-11-22 07:00 in New York
    body = assert_refused_and_nothing_stored(
        api_client,
        valid_payload(date_of_birth="2026-11-23", timezone="America/New_York"),
        bad_fields={"date_of_birth"},
    )
    assert "future" in body["date_of_birth"][0]


@freeze_time("2026-11-22T12:00:00Z")
def test_future_birth_date_with_an_invalid_zone_names_both_fields(api_client):
    assert_refused_and_nothing_stored(
        api_client,
        valid_payload(date_of_birth="2030-01-01", timezone="Nowhere/Special"),
        bad_fields={"date_of_birth", "timezone"},
    )


def test_birth_date_before_1900_is_refused(api_client):
    assert_refused_and_nothing_stored(
        api_client, valid_payload(date_of_birth="1899-12-31"), bad_fields={"date_of_birth"}
    )


def test_birth_date_of_1900_01_01_is_accepted(api_client):
    response = api_client.post(USERS_URL, valid_payload(date_of_birth="1900-01-01"), format="json")
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("value", ["2023-02-29", "2023-13-01", "05/05/1990", "1990-05-05T00:00:00Z", ""])
def test_invalid_date_of_birth_is_refused(api_client, value):
    assert_refused_and_nothing_stored(
        api_client, valid_payload(date_of_birth=value), bad_fields={"date_of_birth"}
    )


@pytest.mark.parametrize(
    "field, value",
    [("first_name", True), ("timezone", None), ("last_name", ["A"]), ("date_of_birth", 19900505)],
)
def test_wrongly_typed_values_are_refused(api_client, field, value):
    assert_refused_and_nothing_stored(api_client, valid_payload(**{field: value}), bad_fields={field})


def test_unknown_field_is_refused_instead_of_ignored(api_client):
    # given a misspelt field name
    payload = valid_payload()
    payload["time_zone"] = payload.pop("timezone")
    payload["timezone"] = "UTC"

    # then the request is refused naming the unknown field
    body = assert_refused_and_nothing_stored(api_client, payload, bad_fields={"time_zone"})
    assert body["time_zone"] == ["Unknown field."]


def test_malformed_json_is_refused(api_client):
    before = stored_counts()

    response = api_client.post(
        USERS_URL, '{"first_name": "Ada", "last_name": ', content_type="application/json"
    )

    assert response.status_code == 400
    assert "detail" in response.json()
    assert stored_counts() == before


def test_json_array_body_is_refused(api_client):
    before = stored_counts()

    response = api_client.post(USERS_URL, json.dumps([valid_payload()]), content_type="application/json")

    assert response.status_code == 400
    assert "non_field_errors" in response.json()
    assert stored_counts() == before


def test_body_over_64_kib_is_refused_with_413(api_client):
    # given an otherwise valid payload padded past 64 KiB
    payload = valid_payload(first_name="Ada" + " " * (64 * 1024))
    before = stored_counts()

    # when posted
    response = api_client.post(USERS_URL, payload, format="json")

    # then it is refused as too large and nothing is stored
    assert response.status_code == 413
    assert "detail" in response.json()
    assert stored_counts() == before


def test_body_just_under_the_limit_is_not_refused_as_too_large(api_client):
    # given a valid JSON body padded with insignificant whitespace to just under 64 KiB
    body = json.dumps(valid_payload())
    body = body[:1] + " " * (64 * 1024 - len(body)) + body[1:]
    assert len(body.encode()) == 64 * 1024

    response = api_client.post(USERS_URL, body, content_type="application/json")

    assert response.status_code == 201, response.content


def test_unknown_uuid_is_404(api_client):
    UserFactory()
    assert api_client.get(detail_url(uuid.uuid4())).status_code == 404
    assert api_client.patch(detail_url(uuid.uuid4()), {"first_name": "X"}, format="json").status_code == 404
    assert api_client.delete(detail_url(uuid.uuid4())).status_code == 404


def test_malformed_id_is_404_not_500(api_client):
    assert api_client.get(detail_url("not-a-uuid")).status_code == 404
    assert api_client.get(events_url("not-a-uuid")).status_code == 404
    assert api_client.delete(detail_url("not-a-uuid")).status_code == 404


@pytest.mark.parametrize(
    "payload, bad_field",
    [
        ({"first_name": "   "}, "first_name"),
        ({"last_name": "z" * 101}, "last_name"),
        ({"timezone": "UTC+5"}, "timezone"),
        ({"date_of_birth": "2023-02-29"}, "date_of_birth"),
        ({"date_of_birth": "1899-01-01"}, "date_of_birth"),
        ({"date_of_birth": "2999-01-01"}, "date_of_birth"),
        ({"time_zone": "Europe/London"}, "time_zone"),
    ],
)
def test_bad_patch_changes_neither_the_user_nor_its_event(api_client, payload, bad_field):
    # given a user and its pending event
    user = UserFactory(first_name="Grace", last_name="Hopper", timezone="Europe/London")
    event = only_pending_event(user)
    user_before = User.objects.values().get(id=user.id)
    event_before = Event.objects.values().get(id=event.id)

    # when a bad patch is sent
    response = api_client.patch(detail_url(user.id), payload, format="json")

    # then it is refused and both rows are exactly as they were
    assert response.status_code == 400
    assert bad_field in response.json()
    assert User.objects.values().get(id=user.id) == user_before
    assert Event.objects.values().get(id=event.id) == event_before
    assert Event.objects.filter(user=user).count() == 1


def test_bad_put_changes_nothing(api_client):
    user = UserFactory(first_name="Grace", timezone="Europe/London")
    event = only_pending_event(user)
    user_before = User.objects.values().get(id=user.id)
    event_before = Event.objects.values().get(id=event.id)

    response = api_client.put(
        detail_url(user.id), valid_payload(first_name="Alan", timezone="+05:00"), format="json"
    )

    assert response.status_code == 400
    assert set(response.json()) == {"timezone"}
    assert User.objects.values().get(id=user.id) == user_before
    assert Event.objects.values().get(id=event.id) == event_before


# --- rescheduling through PUT and PATCH ----------------------------------------------


@freeze_time("2027-01-10T12:00:00Z")
def test_changing_only_the_timezone_moves_the_instant_but_keeps_date_and_key(api_client):
    # given a New York user whose birthday is 2027-05-05, 13:00 UTC
    user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    before = only_pending_event(user)
    assert before.target_timestamp_utc == datetime(2027, 5, 5, 13, 0, tzinfo=UTC)

    # when only the zone is patched to Tokyo
    response = api_client.patch(detail_url(user.id), {"timezone": "Asia/Tokyo"}, format="json")

    # then the same event (same date and key) is moved to 09:00 Tokyo time
    assert response.status_code == 200, response.content
    after = only_pending_event(user)
    assert after.id == before.id
    assert after.occurrence_date == before.occurrence_date == date(2027, 5, 5)
    assert after.idempotency_key == before.idempotency_key
    assert after.target_timestamp_utc == datetime(2027, 5, 5, 0, 0, tzinfo=UTC)
    assert after.target_timestamp_local == "2027-05-05T09:00:00+09:00"
    assert after.target_timezone == "Asia/Tokyo"
    assert after.version == before.version + 1
    assert response.json()["next_event"]["target_timestamp_utc"] == "2027-05-05T00:00:00Z"


@freeze_time("2027-01-10T12:00:00Z")
def test_put_with_only_a_new_timezone_reschedules_the_same_way(api_client):
    user = UserFactory(
        first_name="Ada", last_name="Lovelace", date_of_birth=date(1990, 5, 5), timezone="America/New_York"
    )
    before = only_pending_event(user)

    response = api_client.put(detail_url(user.id), valid_payload(timezone="Europe/London"), format="json")

    assert response.status_code == 200, response.content
    after = only_pending_event(user)
    assert (after.id, after.idempotency_key, after.occurrence_date) == (
        before.id,
        before.idempotency_key,
        before.occurrence_date,
    )
    assert after.target_timestamp_utc == datetime(2027, 5, 5, 8, 0, tzinfo=UTC)
    assert after.version == before.version + 1


def test_timezone_change_whose_new_time_has_passed_leaves_the_event_due_at_once(api_client):
    # given a New York user whose birthday 09:00 (13:00 UTC) has not come yet at 10:00 UTC
    with freeze_time("2027-05-01T00:00:00Z"):
        user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    before = only_pending_event(user)
    assert before.target_timestamp_utc == datetime(2027, 5, 5, 13, 0, tzinfo=UTC)

    # when at 10:00 UTC the zone becomes London, where 09:00 (08:00 UTC) has passed
    with freeze_time("2027-05-05T10:00:00Z"):
        response = api_client.patch(detail_url(user.id), {"timezone": "Europe/London"}, format="json")

    # then the same occurrence stays PENDING with its target in the past: it is due now
    assert response.status_code == 200, response.content
    after = only_pending_event(user)
    assert after.id == before.id
    assert after.occurrence_date == date(2027, 5, 5)
    assert after.idempotency_key == before.idempotency_key
    assert after.status == EventStatus.PENDING
    assert after.target_timestamp_utc == datetime(2027, 5, 5, 8, 0, tzinfo=UTC)
    assert after.target_timestamp_utc < datetime(2027, 5, 5, 10, 0, tzinfo=UTC)
    assert Event.objects.filter(user=user).count() == 1


@freeze_time("2027-01-10T12:00:00Z")
def test_changing_the_date_of_birth_replaces_the_pending_event(api_client):
    # given a user born on 1990-05-05
    user = UserFactory(date_of_birth=date(1990, 5, 5), timezone="America/New_York")
    before = only_pending_event(user)

    # when the date of birth is corrected to 1990-08-10
    response = api_client.patch(detail_url(user.id), {"date_of_birth": "1990-08-10"}, format="json")

    # then exactly one PENDING event exists, for the new date with a new key
    assert response.status_code == 200, response.content
    after = only_pending_event(user)
    assert after.occurrence_date == date(2027, 8, 10)
    assert after.idempotency_key != before.idempotency_key
    assert after.target_timestamp_utc == datetime(2027, 8, 10, 13, 0, tzinfo=UTC)
    assert Event.objects.filter(user=user).count() == 1
    assert not Event.objects.filter(id=before.id).exists()
    assert response.json()["next_event"]["id"] == str(after.id)


@freeze_time("2027-06-01T12:00:00Z")
def test_date_of_birth_change_to_a_day_already_past_this_year_schedules_next_year(api_client):
    user = UserFactory(date_of_birth=date(1990, 8, 10), timezone="Europe/London")

    response = api_client.put(
        detail_url(user.id),
        valid_payload(date_of_birth="1990-03-01", timezone="Europe/London"),
        format="json",
    )

    assert response.status_code == 200, response.content
    assert only_pending_event(user).occurrence_date == date(2028, 3, 1)


@freeze_time("2027-01-10T12:00:00Z")
def test_changing_only_names_leaves_the_event_untouched(api_client):
    # given a user and its pending event
    user = UserFactory(first_name="Grace", last_name="Hopper")
    before = Event.objects.values().get(user=user)

    # when both names are patched
    response = api_client.patch(
        detail_url(user.id), {"first_name": "Ada", "last_name": "Byron"}, format="json"
    )

    # then the event row is exactly as it was (same id, version, target)
    assert response.status_code == 200, response.content
    after = Event.objects.values().get(user=user)
    assert after == before
    user.refresh_from_db()
    assert (user.first_name, user.last_name) == ("Ada", "Byron")


def test_every_bad_field_is_reported_even_when_one_does_not_parse(api_client):
    before = stored_counts()

    response = api_client.post(
        USERS_URL,
        valid_payload(first_name="   ", date_of_birth="2023-02-29", timezone="+05:00"),
        format="json",
    )

    assert response.status_code == 400
    assert set(response.json()) == {"first_name", "date_of_birth", "timezone"}
    assert "offset" in response.json()["timezone"][0]
    assert stored_counts() == before


@pytest.mark.parametrize("bad_value", [42, True, ["Ada"], {"name": "Ada"}])
def test_names_must_be_strings_not_numbers_or_structures(api_client, bad_value):
    before = stored_counts()

    response = api_client.post(USERS_URL, valid_payload(first_name=bad_value), format="json")

    assert response.status_code == 400
    assert "first_name" in response.json()
    assert stored_counts() == before


# --- external_id: the client's own id ----------------------------------------------------


def test_external_id_is_stored_trimmed_and_shown(api_client):
    response = api_client.post(USERS_URL, valid_payload(external_id="  crm-1042 "), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["external_id"] == "crm-1042"
    assert User.objects.get().external_id == "crm-1042"
    assert api_client.get(detail_url(response.json()["id"])).json()["external_id"] == "crm-1042"


@pytest.mark.parametrize("value", [None, "", "   "])
def test_a_blank_or_null_external_id_is_stored_as_none(api_client, value):
    response = api_client.post(USERS_URL, valid_payload(external_id=value), format="json")

    assert response.status_code == 201, response.content
    assert response.json()["external_id"] is None
    assert User.objects.get().external_id is None


def test_recipients_without_an_external_id_do_not_collide(api_client):
    for _ in range(2):
        assert api_client.post(USERS_URL, valid_payload(external_id=""), format="json").status_code == 201
    assert api_client.post(USERS_URL, valid_payload(), format="json").status_code == 201

    assert User.objects.filter(external_id__isnull=True).count() == 3


def test_creating_with_an_external_id_another_recipient_holds_is_400_and_stores_nothing(api_client):
    UserFactory(external_id="crm-1042")
    before = stored_counts()

    response = api_client.post(USERS_URL, valid_payload(external_id=" crm-1042"), format="json")

    assert response.status_code == 400, response.content
    assert set(response.json()) == {"external_id"}
    assert "already used by another recipient" in response.json()["external_id"][0]
    assert stored_counts() == before


@pytest.mark.parametrize("method", ["patch", "put"])
def test_changing_to_an_external_id_another_recipient_holds_is_400_and_changes_nothing(api_client, method):
    UserFactory(external_id="crm-1")
    user = UserFactory(first_name="Grace", external_id="crm-2")
    user_before = User.objects.values().get(id=user.id)
    event_before = Event.objects.values().get(user=user)
    payload = (
        valid_payload(first_name="Ada", external_id="crm-1") if method == "put" else {"external_id": "crm-1"}
    )

    response = getattr(api_client, method)(detail_url(user.id), payload, format="json")

    assert response.status_code == 400, response.content
    assert set(response.json()) == {"external_id"}
    assert User.objects.values().get(id=user.id) == user_before
    assert Event.objects.values().get(user=user) == event_before


def test_patch_sets_and_clears_the_external_id(api_client):
    user = UserFactory()

    set_ = api_client.patch(detail_url(user.id), {"external_id": "crm-7"}, format="json")
    cleared = api_client.patch(detail_url(user.id), {"external_id": None}, format="json")

    assert set_.status_code == 200 and set_.json()["external_id"] == "crm-7"
    assert (set_.json()["version"], cleared.json()["version"]) == (2, 3)
    assert cleared.json()["external_id"] is None
    user.refresh_from_db()
    assert user.external_id is None


def test_put_without_the_external_id_leaves_it_as_it_is(api_client):
    user = UserFactory(external_id="crm-7")

    response = api_client.put(detail_url(user.id), valid_payload(first_name="Alan"), format="json")

    assert response.status_code == 200, response.content
    assert response.json()["external_id"] == "crm-7"


@pytest.mark.parametrize(
    "value, message", [("x" * 256, "at most 255"), (42, "valid string"), (["crm-1"], "valid string")]
)
def test_a_bad_external_id_is_refused(api_client, value, message):
    body = assert_refused_and_nothing_stored(
        api_client, valid_payload(external_id=value), bad_fields={"external_id"}
    )
    assert message in body["external_id"][0]


def test_an_external_id_of_255_characters_after_trimming_is_accepted(api_client):
    response = api_client.post(USERS_URL, valid_payload(external_id=" " + "x" * 255 + " "), format="json")

    assert response.status_code == 201, response.content
    assert User.objects.get().external_id == "x" * 255


def test_a_recipient_is_found_by_its_external_id(api_client):
    UserFactory(external_id="crm-1")
    wanted = UserFactory(external_id="crm-2")
    UserFactory()

    body = api_client.get(USERS_URL, {"external_id": " crm-2 "}).json()

    assert body["count"] == 1
    assert [u["id"] for u in body["results"]] == [str(wanted.id)]
    assert body["results"][0]["next_event"]["status"] == "PENDING"


@pytest.mark.parametrize("value", ["crm-404", "", "CRM-1", "crm\x00-1"])
def test_an_external_id_nobody_holds_finds_an_empty_list(api_client, value):
    UserFactory(external_id="crm-1")
    UserFactory()

    response = api_client.get(USERS_URL, {"external_id": value})

    assert response.status_code == 200
    assert response.json()["count"] == 0 and response.json()["results"] == []


# --- anniversary_date: a second event type --------------------------------------------------


def events_by_type(user) -> dict[str, Event]:
    return {event.event_type: event for event in pending_events(user)}


@freeze_time("2027-01-10T12:00:00Z")
def test_post_with_a_wedding_date_schedules_both_events_and_next_event_stays_the_birthday(api_client):
    # given a wedding day that comes before the birthday
    payload = valid_payload(date_of_birth="1990-05-05", anniversary_date="2015-02-20")

    # when the recipient is created
    response = api_client.post(USERS_URL, payload, format="json")

    # then next_event is still the birthday, and next_events lists both, soonest first
    assert response.status_code == 201, response.content
    body = response.json()
    events = events_by_type(User.objects.get())
    assert body["anniversary_date"] == "2015-02-20"
    assert body["next_event"]["id"] == str(events["BIRTHDAY"].id)
    assert [(e["event_type"], e["occurrence_date"]) for e in body["next_events"]] == [
        ("ANNIVERSARY", "2027-02-20"),
        ("BIRTHDAY", "2027-05-05"),
    ]
    assert body["next_events"][0]["target_timestamp_local"] == "2027-02-20T09:00:00-05:00"
    assert body["next_events"][0]["idempotency_key"] == events["ANNIVERSARY"].idempotency_key
    # and a read shows the same
    read = api_client.get(detail_url(body["id"])).json()
    assert (read["next_event"], read["next_events"]) == (body["next_event"], body["next_events"])


@freeze_time("2027-01-10T12:00:00Z")
def test_a_recipient_without_a_wedding_date_has_one_pending_event(api_client):
    body = api_client.post(USERS_URL, valid_payload(), format="json").json()

    assert body["anniversary_date"] is None
    assert [e["event_type"] for e in body["next_events"]] == ["BIRTHDAY"]
    assert body["next_events"][0] == body["next_event"]


@freeze_time("2027-01-10T12:00:00Z")
def test_the_list_shows_next_event_as_the_birthday_and_next_events_for_each_recipient(api_client):
    UserFactory(date_of_birth=date(1990, 5, 5), anniversary_date=date(2015, 2, 20))

    (listed,) = api_client.get(USERS_URL).json()["results"]

    assert listed["next_event"]["event_type"] == "BIRTHDAY"
    assert [e["event_type"] for e in listed["next_events"]] == ["ANNIVERSARY", "BIRTHDAY"]


@freeze_time("2027-01-10T12:00:00Z")
def test_patch_sets_changes_and_clears_the_wedding_date_and_the_anniversary_follows(api_client):
    user = UserFactory(date_of_birth=date(1990, 5, 5))
    birthday = Event.objects.values().get(user=user)

    set_ = api_client.patch(detail_url(user.id), {"anniversary_date": "2015-06-20"}, format="json")
    first = events_by_type(user)["ANNIVERSARY"]
    changed = api_client.patch(detail_url(user.id), {"anniversary_date": "2016-09-03"}, format="json")
    second = events_by_type(user)["ANNIVERSARY"]
    cleared = api_client.patch(detail_url(user.id), {"anniversary_date": None}, format="json")

    assert [r.status_code for r in (set_, changed, cleared)] == [200, 200, 200]
    assert first.occurrence_date == date(2027, 6, 20)
    assert [e["id"] for e in set_.json()["next_events"]] == [str(birthday["id"]), str(first.id)]
    assert (second.occurrence_date, Event.objects.filter(id=first.id).exists()) == (date(2027, 9, 3), False)
    assert second.idempotency_key != first.idempotency_key
    assert cleared.json()["anniversary_date"] is None
    assert [e["event_type"] for e in cleared.json()["next_events"]] == ["BIRTHDAY"]
    assert list(Event.objects.filter(user=user).values()) == [birthday]


@freeze_time("2027-01-10T12:00:00Z")
def test_a_zone_change_keeps_both_events_occurrence_and_key(api_client):
    user = UserFactory(
        date_of_birth=date(1990, 5, 5), anniversary_date=date(2004, 2, 29), timezone="America/New_York"
    )
    before = events_by_type(user)

    response = api_client.patch(detail_url(user.id), {"timezone": "Asia/Tokyo"}, format="json")

    assert response.status_code == 200, response.content
    after = events_by_type(user)
    for event_type in ("BIRTHDAY", "ANNIVERSARY"):
        assert (
            after[event_type].id,
            after[event_type].occurrence_date,
            after[event_type].idempotency_key,
        ) == (before[event_type].id, before[event_type].occurrence_date, before[event_type].idempotency_key)
        assert after[event_type].target_timezone == "Asia/Tokyo"
    assert after["ANNIVERSARY"].target_timestamp_local == "2027-02-28T09:00:00+09:00"


def test_put_without_the_wedding_date_leaves_it_and_its_anniversary(api_client):
    user = UserFactory(anniversary_date=date(2015, 6, 20))
    anniversary = events_by_type(user)["ANNIVERSARY"]

    response = api_client.put(detail_url(user.id), valid_payload(first_name="Alan"), format="json")

    assert response.status_code == 200, response.content
    assert response.json()["anniversary_date"] == "2015-06-20"
    assert events_by_type(user)["ANNIVERSARY"].id == anniversary.id


@pytest.mark.parametrize(
    "value, message",
    [
        ("1899-12-31", "Anniversary date must not be before 1900-01-01."),
        ("2023-02-29", "Date has wrong format"),
        ("20/06/2015", "Date has wrong format"),
        (20150620, "Date has wrong format"),
    ],
)
def test_a_bad_wedding_date_is_refused(api_client, value, message):
    body = assert_refused_and_nothing_stored(
        api_client, valid_payload(anniversary_date=value), bad_fields={"anniversary_date"}
    )
    assert message in body["anniversary_date"][0]


@freeze_time("2026-11-22T12:00:00Z")
def test_a_wedding_date_in_the_future_in_the_recipients_zone_is_refused_and_today_there_is_not(api_client):
    # it is already the 23rd in Kiritimati, still the 22nd in New York
    body = assert_refused_and_nothing_stored(
        api_client,
        valid_payload(anniversary_date="2026-11-23", timezone="America/New_York"),
        bad_fields={"anniversary_date"},
    )
    accepted = api_client.post(
        USERS_URL, valid_payload(anniversary_date="2026-11-23", timezone="Pacific/Kiritimati"), format="json"
    )

    assert "is in the future" in body["anniversary_date"][0]
    assert accepted.status_code == 201, accepted.content
    assert events_by_type(User.objects.get())["ANNIVERSARY"].occurrence_date == date(2027, 11, 23)
