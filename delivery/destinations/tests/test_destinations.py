"""Destinations: their secrets, formats, services, the fan-out at claim time and when an occurrence is done."""

import base64
import json
import logging
import threading
import time
from datetime import date, timedelta

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from delivery.credentials import signing_secrets as secret_store
from delivery.credentials.receiver_urls import url_decrypt
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.selectors import destination_signing_secrets
from delivery.destinations.services import (
    DestinationInUse,
    destination_create,
    destination_delete,
    destination_drop_previous_secrets,
    destination_pause,
    destination_resume,
    destination_rotate_secret,
    destination_secrets_drop_expired,
    destination_secrets_reencrypt,
    destination_update,
    destination_url_fields,
    destinations_seed_default,
)
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryStatus, Destination, DestinationSecret, Endpoint, EndpointState
from delivery.receivers.lane_settings import LaneSettings
from delivery.states.conclude import events_conclude
from delivery.tests.pipeline import key_of, make_due
from delivery.worker.loop import Worker
from devtools.sink import Reply
from scheduling.models import Event, EventStatus, EventType
from users.services import user_create

pytestmark = pytest.mark.django_db


def new_destination(name: str, url: str | None = None, **fields) -> Destination:
    return destination_create(
        settings=DestinationSettings(name=name, url=url or f"https://{name}.example.org/hook", **fields),
        operator="ops",
    ).destination


def due_user(**overrides):
    """A recipient with a birthday and a wedding anniversary, both due now."""
    fields = {
        "first_name": "Ada",
        "last_name": "Lovelace",
        "date_of_birth": date(1990, 3, 8),
        "timezone": "America/New_York",
        "anniversary_date": date(2015, 6, 1),
    }
    user = user_create(**{**fields, **overrides})
    make_due(list(user.events.all()))
    return user


# --- secrets ---------------------------------------------------------------------------


def test_a_generated_secret_is_whsec_and_32_random_bytes_and_the_signing_library_takes_it():
    value = secret_store.secret_generate()

    assert value.startswith("whsec_")
    assert len(base64.b64decode(value.removeprefix("whsec_"))) == 32
    assert value != secret_store.secret_generate()
    Webhook(value)


@pytest.mark.parametrize(
    "value",
    [
        "abc",
        "whsec_",
        "whsec_not base64!",
        "whsec_" + base64.b64encode(b"x" * 23).decode(),
        "whsec_" + base64.b64encode(b"x" * 65).decode(),
    ],
)
def test_a_supplied_secret_must_be_whsec_and_base64_of_24_to_64_bytes(value):
    with pytest.raises(ValidationError) as raised:
        secret_store.secret_check(value)

    assert value.removeprefix("whsec_") not in " ".join(raised.value.messages) or value == "whsec_"


def test_a_hint_shows_the_prefix_and_four_characters_only():
    value = "whsec_" + base64.b64encode(b"k" * 32).decode()

    assert secret_store.secret_hint(value) == value[:10] + "…"


def test_a_secret_is_stored_encrypted_and_decrypts_to_itself(settings):
    settings.WEBHOOK_SECRET_KEYS = [Fernet.generate_key().decode()]
    value = secret_store.secret_generate()

    ciphertext = secret_store.secret_encrypt(value)

    assert value not in ciphertext and value.removeprefix("whsec_") not in ciphertext
    assert secret_store.secret_decrypt(ciphertext) == value


def test_without_keys_the_secret_key_derives_one_and_a_new_secret_key_cannot_decrypt(settings):
    ciphertext = secret_store.secret_encrypt("whsec_" + base64.b64encode(b"k" * 32).decode())
    settings.SECRET_KEY = "another-secret-key-entirely"

    with pytest.raises(ImproperlyConfigured):
        secret_store.secret_decrypt(ciphertext)


def test_moving_from_the_derived_key_to_explicit_keys_is_set_them_and_reencrypt(settings):
    created = destination_create(
        settings=DestinationSettings(name="hr", url="https://hr.example.org/hook"), operator="ops"
    )
    settings.WEBHOOK_SECRET_KEYS = [Fernet.generate_key().decode()]

    destination_secrets_reencrypt()
    settings.SECRET_KEY = "another-secret-key-entirely"

    assert destination_signing_secrets(destinations=[created.destination], now=timezone.now()) == {
        created.destination.pk: [created.value]
    }


def test_the_encryption_key_rotates_old_first_then_new_first_then_old_dropped_after_reencrypting(settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.WEBHOOK_SECRET_KEYS = [old]
    created = destination_create(
        settings=DestinationSettings(name="hr", url="https://hr.example.org/hook"), operator="ops"
    )

    settings.WEBHOOK_SECRET_KEYS = [new, old]
    assert destination_signing_secrets(destinations=[created.destination], now=timezone.now()) == {
        created.destination.pk: [created.value]
    }
    settings.WEBHOOK_SECRET_KEYS = [new]
    with pytest.raises(ImproperlyConfigured):
        destination_signing_secrets(destinations=[created.destination], now=timezone.now())

    settings.WEBHOOK_SECRET_KEYS = [new, old]
    assert destination_secrets_reencrypt() == 3  # its secret, its URL, its endpoint's copy of the URL
    settings.WEBHOOK_SECRET_KEYS = [new]
    assert destination_signing_secrets(destinations=[created.destination], now=timezone.now()) == {
        created.destination.pk: [created.value]
    }
    created.destination.refresh_from_db()
    assert created.destination.receiver_url() == "https://hr.example.org/hook"
    endpoint = Endpoint.objects.get(key=created.destination.url_key)
    assert url_decrypt(endpoint.url_ciphertext) == "https://hr.example.org/hook"


# --- services ----------------------------------------------------------------------------


def test_create_returns_the_secret_once_and_stores_only_its_ciphertext_and_hint(caplog):
    caplog.set_level(logging.DEBUG)

    created = destination_create(
        settings=DestinationSettings(
            name="crm",
            url="https://crm.example.org/hook",
            event_types=["BIRTHDAY"],
            max_rate=5,
            max_in_flight=3,
            timeout=timedelta(seconds=2),
        ),
        operator="ops-alice",
    )

    destination = Destination.objects.get(name="crm")
    stored = DestinationSecret.objects.get(destination=destination)
    assert created.value.startswith("whsec_")
    assert stored.hint == created.value[:10] + "…"
    assert created.value not in stored.ciphertext
    assert (destination.created_by, destination.updated_by, destination.format) == (
        "ops-alice",
        "ops-alice",
        "standard",
    )
    assert created.value not in caplog.text and created.value[10:] not in caplog.text


def test_a_supplied_secret_is_kept_and_a_bad_one_refused_naming_the_field_and_creating_nothing():
    supplied = "whsec_" + base64.b64encode(b"s" * 24).decode()
    created = destination_create(
        settings=DestinationSettings(name="hr", url="https://hr.example.org/hook"),
        operator="ops",
        secret=supplied,
    )
    assert created.value == supplied

    with pytest.raises(ValidationError) as raised:
        destination_create(
            settings=DestinationSettings(name="crm", url="https://crm.example.org/hook"),
            operator="ops",
            secret="whsec_short",
        )

    assert set(raised.value.message_dict) == {"secret"}
    assert not Destination.objects.filter(name="crm").exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"url": "ftp://files.example.org/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"name": "  "}, "name"),
        ({"event_types": ["BIRTHDAY", "GRADUATION"]}, "event_types"),
        ({"event_types": ["BIRTHDAY", "BIRTHDAY"]}, "event_types"),
        ({"format": "telegram"}, "format"),
        ({"max_rate": 0}, "max_rate"),
        ({"max_in_flight": 0}, "max_in_flight"),
        ({"timeout": timedelta(seconds=11)}, "timeout"),
        ({"timeout": timedelta(0)}, "timeout"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(settings, fields, field):
    settings.WEBHOOK_TIMEOUT = timedelta(seconds=10)
    values = {"name": "crm", "url": "https://crm.example.org/hook", **fields}

    with pytest.raises(ValidationError) as raised:
        destination_create(settings=DestinationSettings(**values), operator="ops")

    assert field in raised.value.message_dict
    assert not Destination.objects.exists()


def test_a_name_or_url_another_destination_has_is_refused_naming_the_field():
    new_destination("hr", "https://hr.example.org/hook")
    crm = new_destination("crm")

    with pytest.raises(ValidationError) as raised:
        destination_update(
            destination=crm, operator="ops", changes={"name": "hr", "url": "https://hr.example.org/hook"}
        )

    assert set(raised.value.message_dict) == {"name", "url"}
    crm.refresh_from_db()
    assert crm.name == "crm"


def test_a_new_url_takes_the_unsent_deliveries_with_it_not_the_history(default_destination):
    due_user()
    Scheduler(once=True).run()
    destination = Destination.objects.get(name="default")
    delivered = Delivery.objects.filter(destination=destination).first()
    Delivery.objects.filter(pk=delivered.pk).update(status=DeliveryStatus.DELIVERED)

    destination_update(
        destination=destination, operator="ops-bob", changes={"url": "https://new.example.org/hook"}
    )

    keys = dict(Delivery.objects.values_list("status", "endpoint_key"))
    assert keys == {
        DeliveryStatus.QUEUED: key_of("https://new.example.org/hook"),
        DeliveryStatus.DELIVERED: key_of(default_destination),
    }
    destination.refresh_from_db()
    assert destination.updated_by == "ops-bob"


SLACK_URL = "https://hooks.slack.com/services/T0001/B0001/XXsecretTOKENXX"


def test_a_slack_destination_shows_its_url_but_the_token_and_so_does_its_endpoint():
    slack = new_destination("team-slack", SLACK_URL, format="slack")

    assert slack.url_display == "https://hooks.slack.com/services/T0001/B0001/…"
    assert Endpoint.objects.get(key=slack.url_key).url_display == slack.url_display


def test_a_new_url_is_shown_as_its_destinations_kind_shows_it():
    slack = new_destination("team-slack", SLACK_URL, format="slack")

    moved = destination_update(
        destination=slack,
        operator="ops",
        changes={"url": "https://hooks.slack.com/services/T0001/B0002/YYotherTOKENYY"},
    )

    assert moved.url_display == "https://hooks.slack.com/services/T0001/B0002/…"
    assert Endpoint.objects.get(key=moved.url_key).url_display == moved.url_display


def test_changing_the_format_shows_the_same_url_as_the_new_kind_shows_it_on_the_destination_and_endpoint():
    destination = new_destination("team", SLACK_URL)
    assert destination.url_display == "https://hooks.slack.com/…"

    as_slack = destination_update(destination=destination, operator="ops", changes={"format": "slack"})
    assert as_slack.url_display == "https://hooks.slack.com/services/T0001/B0001/…"
    assert Endpoint.objects.get(key=as_slack.url_key).url_display == as_slack.url_display

    # Another change leaves it; and back to standard, whose receiver may keep a secret anywhere: the host.
    destination_update(destination=as_slack, operator="ops", changes={"name": "team-slack"})
    assert Destination.objects.get(pk=destination.pk).url_display == as_slack.url_display
    as_standard = destination_update(destination=as_slack, operator="ops", changes={"format": "standard"})
    assert as_standard.url_display == "https://hooks.slack.com/…"
    assert Endpoint.objects.get(key=as_standard.url_key).url_display == "https://hooks.slack.com/…"


def test_a_shown_url_fits_the_columns_that_keep_it():
    from kinds.base import SHOWN_MAX

    for model in (Destination, Endpoint):
        assert model._meta.get_field("url_display").max_length == SHOWN_MAX


def test_a_destination_with_deliveries_to_send_cannot_be_deleted_and_its_history_outlives_it(
    default_destination,
):
    due_user()
    Scheduler(once=True).run()
    destination = Destination.objects.get(name="default")

    with pytest.raises(DestinationInUse):
        destination_delete(destination=destination, operator="ops")
    assert Destination.objects.filter(pk=destination.pk).exists()

    Delivery.objects.update(status=DeliveryStatus.DELIVERED)
    destination_delete(destination=destination, operator="ops")

    assert not Destination.objects.exists()
    assert Delivery.objects.count() == 2
    assert set(Delivery.objects.values_list("destination", flat=True)) == {None}


def test_rotation_signs_with_both_secrets_for_the_grace_period_then_with_the_new_one_only(settings):
    settings.DESTINATION_SECRET_GRACE = timedelta(hours=24)
    created = destination_create(
        settings=DestinationSettings(name="hr", url="https://hr.example.org/hook"), operator="ops"
    )

    rotated = destination_rotate_secret(destination=created.destination, operator="ops")

    now = timezone.now()
    pk = created.destination.pk
    assert destination_signing_secrets(destinations=[created.destination], now=now) == {
        pk: [rotated.value, created.value]
    }
    later = now + timedelta(hours=24, seconds=1)
    assert destination_signing_secrets(destinations=[created.destination], now=later) == {pk: [rotated.value]}
    assert destination_secrets_drop_expired(now=now) == 0
    assert destination_secrets_drop_expired(now=later) == 1
    assert list(DestinationSecret.objects.values_list("hint", flat=True)) == [rotated.secret.hint]


def test_an_operator_can_end_the_grace_period_at_once():
    created = destination_create(
        settings=DestinationSettings(name="hr", url="https://hr.example.org/hook"), operator="ops"
    )
    rotated = destination_rotate_secret(destination=created.destination, operator="ops")

    assert destination_drop_previous_secrets(destination=created.destination, operator="ops") == 1

    assert destination_signing_secrets(destinations=[created.destination], now=timezone.now()) == {
        created.destination.pk: [rotated.value]
    }


def test_pausing_a_destination_pauses_its_endpoint_and_resume_lets_it_go():
    destination = new_destination("hr")

    destination_pause(destination=destination, operator="ops-alice")
    endpoint = Endpoint.objects.get(key=key_of(destination.receiver_url()))
    assert (endpoint.state, endpoint.paused_by) == (EndpointState.PAUSED, "ops-alice")

    destination_resume(destination=destination, operator="ops-alice")
    endpoint.refresh_from_db()
    assert endpoint.state == EndpointState.HEALTHY


def test_webhook_url_and_secret_seed_a_default_destination_once_only_when_none_exists(settings):
    secrets = ["whsec_" + base64.b64encode(bytes([n]) * 32).decode() for n in (1, 2)]
    settings.WEBHOOK_URL = "https://legacy.example.org/hook"
    settings.WEBHOOK_SECRET = " ".join(secrets)

    due_user()
    Scheduler(once=True).run()
    due_user(first_name="Grace")
    Scheduler(once=True).run()

    default = Destination.objects.get()
    assert (default.name, default.receiver_url(), default.event_types, default.format) == (
        "default",
        "https://legacy.example.org/hook",
        [],
        "standard",
    )
    assert sorted(
        destination_signing_secrets(destinations=[default], now=timezone.now())[default.pk]
    ) == sorted(secrets)


@pytest.mark.django_db(transaction=True)
def test_a_claim_seeding_the_default_at_the_same_moment_as_another_process_queues_to_the_others(settings):
    # given WEBHOOK_URL, no destination yet, an occurrence due, and another process (a worker
    # starting, a second scheduler) that has seeded the default destination but not yet committed
    settings.WEBHOOK_URL = "https://legacy.example.org/hook"
    user = due_user(anniversary_date=None)
    seeded, errors = threading.Event(), []

    def other_process():
        try:
            with transaction.atomic():
                destinations_seed_default()
                seeded.set()
                # Commit once the claim below waits on this row (its own insert of the default).
                with connection.cursor() as cursor:
                    for _ in range(200):
                        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
                        if cursor.fetchone()[0]:
                            break
                        time.sleep(0.05)
                    else:
                        errors.append("the claim never waited on the other process's seeding")
        finally:
            connection.close()

    thread = threading.Thread(target=other_process)
    thread.start()
    assert seeded.wait(10)

    # when a scheduler claims meanwhile: its own seeding waits for the other's commit, and is refused
    Scheduler(once=True).run()
    thread.join()

    # then the occurrence is queued to the destination the other process seeded, not completed unsent
    assert errors == []
    delivery = Delivery.objects.select_related("destination").get()
    assert delivery.destination.name == "default"
    assert user.events.get(pk=delivery.event_id).status == EventStatus.PROCESSING


# --- fan-out -------------------------------------------------------------------------------


def test_each_occurrence_gets_one_delivery_per_subscribed_enabled_destination_under_one_key():
    everything = new_destination("everything")
    birthdays = new_destination("birthdays", event_types=["BIRTHDAY"], format="slack")
    anniversaries = new_destination("anniversaries", event_types=["ANNIVERSARY"], format="teams")
    new_destination("switched-off", enabled=False)
    user = due_user()

    Scheduler(once=True).run()

    birthday = user.events.get(event_type=EventType.BIRTHDAY, status=EventStatus.PROCESSING)
    anniversary = user.events.get(event_type=EventType.ANNIVERSARY, status=EventStatus.PROCESSING)
    got = {(d.event_id, d.destination_id): d for d in Delivery.objects.all()}
    assert set(got) == {
        (birthday.id, everything.pk),
        (birthday.id, birthdays.pk),
        (anniversary.id, everything.pk),
        (anniversary.id, anniversaries.pk),
    }
    assert {d.idempotency_key for d in got.values() if d.event_id == birthday.id} == {
        birthday.idempotency_key
    }
    assert (
        got[(birthday.id, birthdays.pk)].payload["text"]
        == got[(birthday.id, everything.pk)].payload["message"]
    )
    assert (
        got[(anniversary.id, anniversaries.pk)].payload["attachments"][0]["content"]["type"] == "AdaptiveCard"
    )
    assert got[(birthday.id, birthdays.pk)].endpoint_key == birthdays.url_key


def test_an_occurrence_no_destination_subscribes_to_is_completed_with_the_reason_and_nothing_queued():
    new_destination("birthdays", event_types=["BIRTHDAY"])
    user = due_user()

    Scheduler(once=True).run()

    anniversary = user.events.exclude(status=EventStatus.PENDING).get(event_type=EventType.ANNIVERSARY)
    assert anniversary.status == EventStatus.COMPLETED
    assert (
        anniversary.failure_reason == "Nothing sent: no enabled destination subscribes to ANNIVERSARY events."
    )
    assert not Delivery.objects.filter(event=anniversary).exists()


def test_without_any_destination_nothing_is_queued_and_the_occurrences_complete(settings):
    settings.WEBHOOK_URL = ""
    user = due_user()

    Scheduler(once=True).run()

    assert not Delivery.objects.exists()
    assert set(user.events.exclude(status=EventStatus.PENDING).values_list("status", flat=True)) == {
        EventStatus.COMPLETED
    }


# --- when an occurrence is done ----------------------------------------------------------


@pytest.fixture
def two_receivers(delivery_settings, sink):
    from delivery.tests.pipeline import ScriptedSink

    with ScriptedSink() as chat:
        delivery_settings.WEBHOOK_URL = ""
        standard = destination_create(
            settings=DestinationSettings(name="crm", url=sink.url, event_types=["BIRTHDAY"]), operator="ops"
        )
        slack = destination_create(
            settings=DestinationSettings(name="chat", url=chat.url, event_types=["BIRTHDAY"], format="slack"),
            operator="ops",
        )
        yield (sink, standard), (chat, slack)


def test_every_destination_receives_its_body_under_the_same_key_signed_with_its_secret_a_chat_one_unsigned(
    two_receivers,
):
    (crm_sink, crm), (chat_sink, chat) = two_receivers
    user = due_user(anniversary_date=None)

    Scheduler(once=True).run()
    Worker(once=True).run()

    event = user.events.get(status=EventStatus.COMPLETED)
    [crm_request], [chat_request] = crm_sink.received, chat_sink.received
    assert crm_request.idempotency_key == chat_request.idempotency_key == event.idempotency_key
    assert Webhook(crm.value).verify(crm_request.raw_body, dict(crm_request.headers.items()))["message"]
    # A chat service checks no signature: its destination has no secret, and its requests carry none.
    assert chat.value is None and "webhook-signature" not in {k.lower() for k in chat_request.headers}
    assert "text" in json.loads(chat_request.raw_body)


def test_one_dead_destination_fails_the_occurrence_naming_it_and_the_other_is_still_delivered(two_receivers):
    (crm_sink, _crm), (chat_sink, _chat) = two_receivers
    chat_sink.default = Reply(status=422)
    user = due_user(anniversary_date=None)

    Scheduler(once=True).run()
    Worker(once=True).run()

    event = user.events.get(status=EventStatus.FAILED)
    assert dict(Delivery.objects.values_list("destination__name", "status")) == {
        "crm": DeliveryStatus.DELIVERED,
        "chat": DeliveryStatus.DEAD,
    }
    assert event.failure_reason.startswith("Dead at chat: ")
    assert len(crm_sink.received) == 1


def test_resending_the_dead_destination_reopens_the_occurrence_and_sends_only_there(two_receivers):
    from delivery.actions.resend import delivery_resend

    (crm_sink, _crm), (chat_sink, _chat) = two_receivers
    chat_sink.default = Reply(status=422)
    user = due_user(anniversary_date=None)
    Scheduler(once=True).run()
    Worker(once=True).run()
    chat_sink.default = Reply()

    delivery_resend(delivery=Delivery.objects.get(destination__name="chat"), operator="support")
    assert user.events.exclude(status=EventStatus.PENDING).get().status == EventStatus.PROCESSING
    Worker(once=True).run()

    assert user.events.exclude(status=EventStatus.PENDING).get().status == EventStatus.COMPLETED
    assert (len(crm_sink.received), len(chat_sink.received)) == (1, 2)


def test_the_occurrence_stays_processing_while_a_delivery_is_unsent():
    new_destination("one")
    new_destination("two")
    user = due_user(anniversary_date=None)
    Scheduler(once=True).run()
    first, second = Delivery.objects.order_by("destination__name")
    Delivery.objects.filter(pk=first.pk).update(status=DeliveryStatus.DELIVERED)

    assert events_conclude(event_ids=[first.event_id], now=timezone.now()) == (0, 0)
    assert user.events.get(pk=first.event_id).status == EventStatus.PROCESSING

    Delivery.objects.filter(pk=second.pk).update(status=DeliveryStatus.DELIVERED)
    assert events_conclude(event_ids=[first.event_id], now=timezone.now()) == (1, 0)


@pytest.mark.django_db(transaction=True)
def test_two_workers_ending_the_last_two_deliveries_at_once_conclude_the_occurrence_exactly_once():
    # given an occurrence with two deliveries in flight, each finished by another connection
    new_destination("one")
    new_destination("two")
    user = due_user(anniversary_date=None)
    Scheduler(once=True).run()
    deliveries = list(Delivery.objects.order_by("destination__name"))
    event_id = deliveries[0].event_id
    version = Event.objects.get(pk=event_id).version
    both_moved = threading.Barrier(2, timeout=10)
    errors = []

    def record(delivery):
        try:
            with transaction.atomic():
                Delivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.DELIVERED)
                # Neither has committed: each sees the other's delivery still unsent.
                both_moved.wait()
                events_conclude(event_ids=[event_id], now=timezone.now())
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    # when both record at once
    threads = [threading.Thread(target=record, args=(d,)) for d in deliveries]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # then the later one saw the other's commit, and the event moved once
    assert errors == []
    event = user.events.get(pk=event_id)
    assert (event.status, event.version) == (EventStatus.COMPLETED, version + 1)


def test_concluding_reads_each_occurrences_own_deliveries_by_key_uncompiled_however_little_the_planner_knows():
    # given 3,000 occurrences with a delivery to each of three destinations, all written since the
    # table was last analyzed, as at 09:00: the planner has no statistics of them
    destinations = [new_destination(name).pk for name in ("one", "two", "three")]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO users_user (id, first_name, last_name, date_of_birth, timezone, created_at, updated_at) "
            "SELECT md5('u' || i)::uuid, 'Ada', 'Lovelace' || i, date '1990-03-08', 'UTC', now(), now() "
            "FROM generate_series(1, 3000) i"
        )
        cursor.execute(
            "INSERT INTO scheduling_event (id, user_id, event_type, status, occurrence_date, target_timestamp_utc, "
            "target_timestamp_local, target_timezone, failure_reason, version, idempotency_key, created_at, "
            "updated_at) SELECT md5('e' || i)::uuid, md5('u' || i)::uuid, 'BIRTHDAY', 'PROCESSING', current_date, "
            "now(), '', 'UTC', '', 1, 'k' || i, now(), now() FROM generate_series(1, 3000) i"
        )
        cursor.execute(
            "INSERT INTO delivery_delivery (id, event_id, destination_id, idempotency_key, endpoint_key, payload, "
            "status, attempts, max_attempts, next_attempt_at, locked_by, last_error, delivered_at, created_at, "
            "updated_at) SELECT gen_random_uuid(), md5('e' || i)::uuid, t, 'k' || i, 'x', "
            "'{}', 'DELIVERED', 1, 8, now(), '', '', now(), now(), now() "
            "FROM generate_series(1, 3000) i, unnest(%s::bigint[]) t",
            [destinations],
        )
    events = list(Event.objects.filter(status=EventStatus.PROCESSING).values_list("pk", flat=True)[:200])
    with connection.cursor() as cursor:
        # However cheap the tiny table makes it look, a statement the server would compile is seen compiled.
        cursor.execute("SET LOCAL jit_above_cost = 0")

    # when a worker concludes a batch's worth of them
    with CaptureQueriesContext(connection) as ran:
        assert events_conclude(event_ids=events, now=timezone.now()) == (200, 0)

    # then the deliveries are read through the key of each occurrence, never all of them, and not compiled
    reads = [q["sql"] for q in ran.captured_queries if "FROM delivery_delivery" in q["sql"]]
    assert len(reads) == 1
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + reads[0])
        plan = cursor.fetchone()[0]
    plan = (json.loads(plan) if isinstance(plan, str) else plan)[0]
    assert "JIT" not in plan
    scans = [node for node in plan_nodes(plan["Plan"]) if node.get("Relation Name") == "delivery_delivery"]
    # An index scan's condition, or a bitmap heap scan's recheck of what its index scan found.
    conditions = [node.get("Index Cond") or node.get("Recheck Cond") or "" for node in scans]
    assert scans and all("event_id" in condition for condition in conditions), [
        node["Node Type"] for node in scans
    ]


def plan_nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


@pytest.mark.parametrize(
    "fields",
    [
        {"event_types": ["GRADUATION"]},
        {"format": "telegram"},
        {"timeout": timedelta(0)},
        {"max_rate": 0.0},
        {"max_in_flight": 0},
        {"name": ""},
    ],
)
def test_the_database_refuses_what_the_service_would_have_refused(fields):
    from django.db import IntegrityError

    with pytest.raises(IntegrityError), transaction.atomic():
        Destination.objects.create(
            **{"name": "x", **destination_url_fields(url="https://x.example.org/"), **fields}
        )


# --- the worker follows the destinations -------------------------------------------------


def lanes():
    from delivery.worker.lanes import Lanes

    return Lanes(worker="w1", concurrency=None, batch_size=10, lease=timedelta(seconds=30))


def test_a_workers_lane_follows_its_destinations_secrets_timeout_and_limits_at_its_next_refresh(settings):
    settings.WEBHOOK_URL = ""
    created = destination_create(
        settings=DestinationSettings(
            name="crm", url="https://crm.example.org/hook", max_rate=5, timeout=timedelta(seconds=2)
        ),
        operator="ops",
    )
    worker_lanes = lanes()

    worker_lanes.refresh_if_due()
    lane = worker_lanes.by_key[created.destination.url_key]
    assert lane.settings == LaneSettings(
        max_rate=5, max_in_flight=0, timeout=2.0, signing_secrets=(created.value,)
    )

    rotated = destination_rotate_secret(destination=created.destination, operator="ops")
    destination_update(
        destination=created.destination,
        operator="ops",
        changes={"max_rate": None, "max_in_flight": 3, "timeout": None},
    )
    worker_lanes.stale = True  # as a second later
    worker_lanes.refresh_if_due()

    # the defaults for what it no longer sets: the fleet's (no max rate, WEBHOOK_TIMEOUT)
    assert lane.settings == LaneSettings(
        max_rate=0.0,
        max_in_flight=3,
        timeout=settings.WEBHOOK_TIMEOUT.total_seconds(),
        signing_secrets=(rotated.value, created.value),
    )
    headers = lane.settings.signer.headers(msg_id="event-1", body="{}", sent_at=timezone.now())
    assert len(headers["webhook-signature"].split()) == 2


def test_a_worker_starting_with_no_destination_seeds_the_default_from_webhook_url(settings):
    settings.WEBHOOK_URL = "https://legacy.example.org/hook"

    Worker(once=True).run()

    assert Destination.objects.get().name == "default"
