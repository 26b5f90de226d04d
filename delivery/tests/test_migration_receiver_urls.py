"""Migration 0012: receiver URLs stored before are encrypted, keyed and normalised, losing nothing of what is sent."""

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from delivery.credentials.receiver_urls import url_decrypt
from delivery.tests.pipeline import key_of

BEFORE = [("delivery", "0011_recoveries")]
AFTER = [("delivery", "0012_urlcreds_receiver_urls_encrypted")]
SLACK = "https://hooks.slack.com/services/T0001/B0001/XXXXSECRETTOKENXXXX"


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def at_0011(transactional_db):
    old = migrate(BEFORE)
    yield old
    migrate(executor_leaf())


def executor_leaf():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_stored_urls_are_encrypted_keyed_and_normalised_and_spellings_of_one_receiver_merged(at_0011):
    # given destinations and deliveries stored before: a Slack URL spelt with upper case and a default port,
    # the same receiver's endpoint twice (two spellings), one of them paused, and a paused endpoint an
    # edited URL left behind
    Destination = at_0011.get_model("delivery", "Destination")
    Endpoint = at_0011.get_model("delivery", "Endpoint")
    Delivery = at_0011.get_model("delivery", "Delivery")
    User = at_0011.get_model("users", "User")
    Event = at_0011.get_model("scheduling", "Event")
    spelt = "HTTPS://Hooks.Slack.com:443/services/T0001/B0001/XXXXSECRETTOKENXXXX#top"
    slack = Destination.objects.create(name="team-slack", url=spelt)
    crm = Destination.objects.create(name="crm", url="https://crm.example.org/hook")
    now = timezone.now()
    Endpoint.objects.create(url=spelt)
    Endpoint.objects.create(url=SLACK, state="PAUSED", paused_by="ops-alice", paused_at=now)
    Endpoint.objects.create(
        url="https://old.example.org/hook", state="PAUSED", paused_by="ops", paused_at=now
    )
    user = User.objects.create(
        first_name="Ada", last_name="Lovelace", date_of_birth="1990-03-08", timezone="UTC"
    )
    for number, (destination, url, status) in enumerate(
        [
            (slack, spelt, "QUEUED"),
            (crm, "https://crm.example.org/hook", "DELIVERED"),
            (crm, "https://old.example.org/hook", "DELIVERED"),
        ]
    ):
        event = Event.objects.create(
            user=user,
            event_type="BIRTHDAY",
            status="COMPLETED",
            occurrence_date=f"202{number}-03-08",
            target_timestamp_utc=now,
            target_timestamp_local="",
            target_timezone="UTC",
            idempotency_key=f"k{number}",
        )
        Delivery.objects.create(
            id=uuid.uuid4(),
            event=event,
            destination=destination,
            idempotency_key=f"k{number}",
            endpoint_url=url,
            payload={},
            status=status,
            max_attempts=8,
            next_attempt_at=now,
        )

    # when the migration runs
    new = migrate(AFTER)

    # then each URL is stored encrypted, in its one spelling, known by its key, shown redacted
    Destination = new.get_model("delivery", "Destination")
    Endpoint = new.get_model("delivery", "Endpoint")
    Delivery = new.get_model("delivery", "Delivery")
    stored = {d.name: d for d in Destination.objects.all()}
    assert url_decrypt(stored["team-slack"].url_ciphertext) == SLACK
    assert stored["team-slack"].url_key == key_of(SLACK)
    assert stored["team-slack"].url_display == "https://hooks.slack.com/…"
    assert "XXXXSECRETTOKENXXXX" not in str(Destination.objects.values().get(name="team-slack"))
    # one endpoint per receiver in use, the pause kept; the edited URL's orphan gone
    endpoints = {e.key: e for e in Endpoint.objects.all()}
    assert set(endpoints) == {key_of(SLACK), key_of("https://crm.example.org/hook")}
    assert (endpoints[key_of(SLACK)].state, endpoints[key_of(SLACK)].paused_by) == ("PAUSED", "ops-alice")
    assert url_decrypt(endpoints[key_of(SLACK)].url_ciphertext) == SLACK
    # every delivery names its receiver by key, the history's too
    assert set(Delivery.objects.values_list("endpoint_key", flat=True)) == {
        key_of(SLACK),
        key_of("https://crm.example.org/hook"),
        key_of("https://old.example.org/hook"),
    }

    # and a rollback gives the URLs back where a destination or endpoint still knows them
    old = migrate(BEFORE)
    Destination = old.get_model("delivery", "Destination")
    Delivery = old.get_model("delivery", "Delivery")
    assert dict(Destination.objects.values_list("name", "url")) == {
        "team-slack": SLACK,
        "crm": "https://crm.example.org/hook",
    }
    assert sorted(Delivery.objects.values_list("endpoint_url", flat=True)) == [
        "",
        "https://crm.example.org/hook",
        SLACK,
    ]


@pytest.mark.django_db(transaction=True)
def test_two_destinations_at_one_receiver_stop_the_migration_naming_both(at_0011):
    Destination = at_0011.get_model("delivery", "Destination")
    Destination.objects.create(name="one", url="https://r.example.org/hook")
    Destination.objects.create(name="two", url="HTTPS://R.example.org:443/hook#x")

    with pytest.raises(RuntimeError, match="'one' and 'two' send to one receiver"):
        migrate(AFTER)

    assert set(Destination.objects.values_list("name", "url")) == {
        ("one", "https://r.example.org/hook"),
        ("two", "HTTPS://R.example.org:443/hook#x"),
    }
    Destination.objects.filter(name="two").delete()
