"""A recipient's labels and language: their rules, through the API, the import and the database."""

from datetime import date

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction

from delivery.destinations.audience import Audience
from scheduling.labels import clean_labels
from scheduling.languages import clean_language, language_fallbacks
from users.models import User
from users.selectors import user_labels_filter
from users.services import user_create, user_update
from users.tests.test_import_users import run_failing_import, run_import, write_csv

pytestmark = pytest.mark.django_db

USERS_URL = "/api/v1/users/"


def recipient_fields(**fields) -> dict:
    """A recipient's fields as user_create takes them."""
    return {**new_recipient(**fields), "date_of_birth": date(1990, 5, 5)}


def new_recipient(**fields) -> dict:
    return {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": "1990-05-05",
        "timezone": "Europe/Berlin",
        **fields,
    }


# --- the rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (["team:platform", "office:berlin"], ["office:berlin", "team:platform"]),
        ([" Team:Platform ", "team:platform", "REMOTE"], ["remote", "team:platform"]),
        (["on-call", "v1.2", "a_b"], ["a_b", "on-call", "v1.2"]),
        ([], []),
        (None, []),
    ],
)
def test_labels_are_trimmed_lowercased_without_repeats_and_sorted(given, stored):
    assert clean_labels(given) == stored


@pytest.mark.parametrize(
    "given",
    [
        ["team platform"],
        ["team:plat:form"],
        [":platform"],
        ["team:"],
        ["-lead"],
        ["équipe"],
        ["x" * 51],
        [""],
        "team:platform",
        [1],
        [f"l{i}" for i in range(21)],
    ],
)
def test_a_label_off_the_grammar_or_too_many_is_refused(given):
    with pytest.raises(ValidationError):
        clean_labels(given)


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("de", "de"),
        ("pt-br", "pt-BR"),
        ("ZH-hant-tw", "zh-Hant-TW"),
        ("es-419", "es-419"),
        ("", ""),
        (None, ""),
    ],
)
def test_a_language_is_a_bcp47_tag_in_its_usual_case(given, stored):
    assert clean_language(given) == stored


@pytest.mark.parametrize("given", ["german", "de_DE", "d", "de-DE-x-private", "12", "de-", 7])
def test_a_language_that_is_no_tag_is_refused(given):
    with pytest.raises(ValidationError):
        clean_language(given)


def test_a_languages_fallbacks_drop_a_subtag_at_a_time_down_to_the_default():
    assert language_fallbacks("zh-Hant-TW") == ["zh-Hant-TW", "zh-Hant", "zh", ""]
    assert language_fallbacks("pt-BR") == ["pt-BR", "pt", ""]
    assert language_fallbacks("") == [""]


# --- the API ---------------------------------------------------------------------------


def test_the_api_stores_labels_and_language_normalised_and_shows_them(api_client):
    # when a recipient is created with labels and a language in another case
    response = api_client.post(
        USERS_URL, new_recipient(labels=["Team:Platform", "office:berlin"], language="pt-br"), format="json"
    )

    # then they are stored and shown as the rules write them
    assert response.status_code == 201, response.data
    assert response.data["labels"] == ["office:berlin", "team:platform"]
    assert response.data["language"] == "pt-BR"
    user = User.objects.get(pk=response.data["id"])
    assert (user.labels, user.language) == (["office:berlin", "team:platform"], "pt-BR")


@pytest.mark.parametrize(
    ("field", "value"),
    [("labels", ["team platform"]), ("labels", "team:platform"), ("language", "german"), ("language", 5)],
)
def test_a_bad_label_or_language_is_a_400_naming_the_field_and_creates_nothing(api_client, field, value):
    response = api_client.post(USERS_URL, new_recipient(**{field: value}), format="json")

    assert response.status_code == 400
    assert set(response.data) == {field}
    assert not User.objects.exists()


def test_a_patch_of_labels_changes_them_and_a_bad_one_changes_nothing(api_client):
    user = user_create(**recipient_fields(labels=["team:data"]))

    ok = api_client.patch(f"{USERS_URL}{user.pk}/", {"labels": ["team:platform"]}, format="json")
    bad = api_client.patch(f"{USERS_URL}{user.pk}/", {"labels": ["no spaces"]}, format="json")

    assert ok.status_code == 200 and ok.data["labels"] == ["team:platform"]
    assert bad.status_code == 400 and "labels" in bad.data
    user.refresh_from_db()
    assert user.labels == ["team:platform"]
    assert user.version == 2


def test_the_list_is_filtered_by_one_label_or_by_every_one_of_several(api_client):
    # given three recipients with overlapping labels
    ada = user_create(**recipient_fields(first_name="Ada", labels=["team:platform", "office:berlin"]))
    bob = user_create(**recipient_fields(first_name="Bob", labels=["team:platform"]))
    user_create(**recipient_fields(first_name="Cy", labels=["team:data", "office:berlin"]))

    # when the list is filtered
    platform = api_client.get(USERS_URL, {"label": "TEAM:platform"})
    both = api_client.get(f"{USERS_URL}?label=team:platform&label=office:berlin")
    nobody = api_client.get(USERS_URL, {"label": "no such label"})

    # then each holds the recipients with every label asked for
    assert {row["id"] for row in platform.data["results"]} == {str(ada.pk), str(bob.pk)}
    assert [row["id"] for row in both.data["results"]] == [str(ada.pk)]
    assert nobody.status_code == 200 and nobody.data["results"] == []


def test_the_label_filter_and_an_audience_are_queries_the_labels_index_serves():
    # given the filter's query and an audience's, as the ORM writes them; sequential and plain
    # index scans priced out, so the plan says whether the labels' index *can* serve them (on a
    # test table of a few rows the planner would rightly scan, or walk the list's order index)
    queries = [
        User.objects.filter(user_labels_filter(labels=["team:platform"])),
        User.objects.filter(Audience(frozenset({"team:platform", "team:data"})).recipient_filter()),
    ]
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_indexscan = off")
        plans = [query.explain() for query in queries]

    # then both read user_labels_idx
    assert all("user_labels_idx" in plan for plan in plans), plans


@pytest.mark.parametrize(
    "labels", [[f"l{i}" for i in range(21)], ["Team:Platform"], ["team platform"], ["a", "b:"], [""]]
)
def test_the_database_refuses_labels_off_the_rule_written_around_the_services(labels):
    user = user_create(**recipient_fields())
    with pytest.raises(IntegrityError), transaction.atomic():
        User.objects.filter(pk=user.pk).update(labels=labels)


def test_the_database_takes_labels_by_the_rule():
    user = user_create(**recipient_fields())

    User.objects.filter(pk=user.pk).update(labels=["a", "office:berlin", "team:platform", "v1.2_x-y"])
    User.objects.filter(pk=user.pk).update(labels=[])


@pytest.mark.parametrize("field", ["audience_labels", "excluded_labels"])
def test_the_database_refuses_an_audience_off_the_rule(field):
    from delivery.destinations.services import destination_url_fields
    from delivery.models import Destination

    destination = Destination.objects.create(
        name="d", **destination_url_fields(url="https://d.example.org/h")
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        Destination.objects.filter(pk=destination.pk).update(**{field: ["Team:Platform"]})


def test_a_label_change_keeps_the_pending_events_and_their_keys():
    user = user_create(**recipient_fields())
    before = set(user.events.values_list("id", "idempotency_key", "target_timestamp_utc"))

    user_update(user=user, data={"labels": ["team:platform"], "language": "de"})

    assert set(user.events.values_list("id", "idempotency_key", "target_timestamp_utc")) == before


# --- the import ------------------------------------------------------------------------


def test_the_import_takes_labels_separated_by_semicolons_and_a_language(tmp_path):
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,external_id,labels,language\n"
        "Ada,Lovelace,1990-05-05,Europe/Berlin,a1,team:platform;Office:Berlin,de\n"
        "Bob,Byte,1991-06-06,Europe/Berlin,b1,,\n",
    )

    run_import(path)

    assert User.objects.get(external_id="a1").labels == ["office:berlin", "team:platform"]
    assert User.objects.get(external_id="a1").language == "de"
    assert (User.objects.get(external_id="b1").labels, User.objects.get(external_id="b1").language) == (
        [],
        "",
    )


def test_an_import_run_again_with_new_labels_updates_them(tmp_path):
    header = "first_name,last_name,date_of_birth,timezone,external_id,labels\n"
    run_import(write_csv(tmp_path, header + "Ada,Lovelace,1990-05-05,Europe/Berlin,a1,team:data\n"))

    run_import(write_csv(tmp_path, header + "Ada,Lovelace,1990-05-05,Europe/Berlin,a1,team:platform\n"))

    assert User.objects.get(external_id="a1").labels == ["team:platform"]


def test_an_import_with_a_bad_label_or_language_names_the_line_and_field_and_imports_nothing(tmp_path):
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,labels,language\n"
        "Ada,Lovelace,1990-05-05,Europe/Berlin,team platform,de\n"
        "Bob,Byte,1991-06-06,Europe/Berlin,,klingon\n",
    )

    _, err = run_failing_import(path)

    assert "line 2: labels:" in err
    assert "line 3: language:" in err
    assert not User.objects.exists()
