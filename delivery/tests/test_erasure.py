"""Erase (DELETE) and export of a recipient: every copy of their personal data, and nothing else."""

import importlib
import threading
import time
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connections, transaction
from django.urls import reverse
from django.utils import timezone

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create, destination_pause, destination_resume
from delivery.dispatch.retention import history_cutoff, history_prune_batches
from delivery.dispatch.scheduler import Scheduler
from delivery.models import AttemptOutcome, Delivery, DeliveryAttempt, Endpoint
from delivery.receivers.protocol import SendResult
from delivery.rules.answers import Signal
from delivery.tests.pipeline import endpoint_columns, key_of, make_due
from delivery.worker.leases import deliveries_claim
from delivery.worker.loop import Worker
from delivery.worker.record import deliveries_record
from devtools.sink import Reply
from scheduling.models import DeletedRecipientOccurrence, Event, EventStatus
from users.models import User
from users.services import user_erase
from users.tests.traces import traces

pytestmark = pytest.mark.django_db

USERS_URL = "/api/v1/users/"
PERSON = {
    "first_name": "Zephyrine",
    "last_name": "Quackenbush",
    "date_of_birth": "1990-05-05",
    "timezone": "Europe/London",
    "external_id": "crm-erase-4242",
    # Given as typed; stored normalised (users.validators.clean_email), which the needles look for.
    "email": "Zephyrine.Q@Bücher.Example",
}
STORED_EMAIL = "Zephyrine.Q@xn--bcher-kva.example"


def needles(user_id: str) -> tuple[str, ...]:
    return (
        PERSON["first_name"],
        PERSON["last_name"],
        PERSON["external_id"],
        STORED_EMAIL,
        user_id,
        user_id.replace("-", ""),
    )


@pytest.fixture
def exporter(api_client, operator):
    operator.user_permissions.add(*Permission.objects.filter(codename="view_delivery"))
    return api_client


# A receiver that echoes the message in its status line, as some gateways and chat services do.
ECHOING_REASON = "Unavailable for Hey, Zephyrine Quackenbush it's your birthday"


def greeted(api_client, sink, console=None) -> dict:
    """The person, created through the API, greeted after one failure (the receiver's answers name them,
    in the reason phrase and the body), edited in the console if given, with next year's event pending."""
    body = api_client.post(USERS_URL, PERSON, format="json").json()
    event = Event.objects.get(user_id=body["id"])
    sink.script(
        event.idempotency_key,
        Reply(status=503, reason=ECHOING_REASON, body=b'{"error": "busy, retry Zephyrine Quackenbush"}'),
        Reply(status=200, body=b'{"stored": "Zephyrine Quackenbush"}'),
    )
    make_due([event])
    Scheduler(once=True).run()
    Worker(once=True).run()
    Delivery.objects.update(next_attempt_at=timezone.now())
    Worker(once=True).run()
    assert Event.objects.get(pk=event.pk).status == EventStatus.COMPLETED
    if console is not None:
        console.post(
            reverse("admin:users_user_changelist"),
            {"action": "pause_greetings", "_selected_action": [body["id"]]},
        )
        console.post(
            reverse("admin:users_user_changelist"),
            {"action": "resume_greetings", "_selected_action": [body["id"]]},
        )
    return body


def test_the_export_holds_every_row_about_the_recipient(exporter, delivery_settings, sink, console):
    body = greeted(exporter, sink, console)

    response = exporter.get(f"{USERS_URL}{body['id']}/export/")

    assert response.status_code == 200, response.content
    export = response.json()
    assert export["recipient"]["first_name"] == "Zephyrine"
    assert export["recipient"]["external_id"] == "crm-erase-4242"
    assert export["recipient"]["email"] == STORED_EMAIL
    assert export["recipient"]["paused_by"] == "ops-alice"
    assert [event["status"] for event in export["events"]] == ["COMPLETED", "PENDING"]  # by occurrence date
    [delivery] = export["deliveries"]
    assert delivery["payload"]["message"] == "Hey, Zephyrine Quackenbush it's your birthday"
    assert [a["status_code"] for a in delivery["attempt_log"]] == [503, 200]
    assert "Zephyrine" in delivery["attempt_log"][0]["response_excerpt"]
    assert [entry["message"] for entry in export["console_log"]] == ["Paused greetings", "Resumed greetings"]
    assert export["console_log"][0]["operator"] == "ops-alice"


def test_the_export_keeps_every_columns_name_and_value_and_answers_no_store(
    exporter, delivery_settings, sink
):
    body = greeted(exporter, sink)

    response = exporter.get(f"{USERS_URL}{body['id']}/export/")

    assert response["Cache-Control"] == "no-store"
    export = response.json()
    [delivery] = export["deliveries"]
    # Every column of each row, under its own name: the delivery's attempt count is not hidden by its attempts
    stored = Delivery.objects.get()
    assert {f.attname for f in Delivery._meta.concrete_fields} <= set(delivery)
    assert delivery["attempts"] == stored.attempts == 2
    assert {f.attname for f in DeliveryAttempt._meta.concrete_fields} <= set(delivery["attempt_log"][0])
    assert {f.attname for f in User._meta.concrete_fields} <= set(export["recipient"])
    assert {f.attname for f in Event._meta.concrete_fields} <= set(export["events"][0])


def test_the_export_needs_the_permissions_to_view_events_and_deliveries_and_an_unknown_id_is_404(
    api_client, exporter
):
    user_id = api_client.post(USERS_URL, PERSON, format="json").json()["id"]
    assert exporter.get(f"{USERS_URL}{user_id}/export/").status_code == 200
    assert exporter.get(f"{USERS_URL}00000000-0000-0000-0000-000000000000/export/").status_code == 404


def test_the_export_is_refused_without_the_permission_to_view_deliveries(api_client):
    user_id = api_client.post(USERS_URL, PERSON, format="json").json()["id"]

    assert api_client.get(f"{USERS_URL}{user_id}/export/").status_code == 403


def test_after_the_erase_no_column_of_any_table_holds_the_recipient_and_the_bare_attempts_stay(
    exporter, delivery_settings, sink, console
):
    body = greeted(exporter, sink, console)
    # What the search looks for is there before: it can fail.
    assert {table for table, _column in traces(*needles(body["id"]))} >= {
        "users_user",
        "scheduling_event",
        "delivery_delivery",
        "delivery_deliveryattempt",
        "django_admin_log",
    }

    response = exporter.delete(f"{USERS_URL}{body['id']}/")

    assert response.status_code == 204
    assert traces(*needles(body["id"])) == {}
    assert not User.objects.exists() and not Event.objects.exists() and not Delivery.objects.exists()
    assert not LogEntry.objects.filter(object_id=body["id"]).exists()
    # The attempts stay, naming no one: when, how long, how it went.
    kept = list(
        DeliveryAttempt.objects.order_by("number").values(
            "delivery_id", "status_code", "outcome", "error", "response_excerpt"
        )
    )
    assert kept == [
        {
            "delivery_id": None,
            "status_code": 503,
            "outcome": AttemptOutcome.TRANSIENT_FAILURE,
            "error": "",
            "response_excerpt": "",
        },
        {
            "delivery_id": None,
            "status_code": 200,
            "outcome": AttemptOutcome.DELIVERED,
            "error": "",
            "response_excerpt": "",
        },
    ]
    # and, for the catch-up window, the day already greeted under a digest of the external id
    assert DeletedRecipientOccurrence.objects.count() == 1


def test_what_a_receiver_said_is_kept_only_on_the_attempt_rows_and_no_log_line_carries_it(
    exporter, delivery_settings, sink, caplog
):
    caplog.set_level("INFO")
    body = greeted(exporter, sink)

    # The receiver's words are on the attempt's row, the one record the erase strips
    first = DeliveryAttempt.objects.get(number=1)
    assert (first.error, first.response_excerpt) == (
        ECHOING_REASON,
        '{"error": "busy, retry Zephyrine Quackenbush"}',
    )
    # and nowhere an erase cannot reach: the endpoint (which outlives every recipient) keeps the status only
    endpoint = Endpoint.objects.get()
    assert endpoint.last_error == "HTTP 503 (Service Unavailable)"
    assert {table for table, _column in traces(PERSON["last_name"])} == {
        "users_user",
        "delivery_delivery",
        "delivery_deliveryattempt",
    }
    # nor in any line the processes logged; their address is on their row alone
    assert [r.getMessage() for r in caplog.records if PERSON["last_name"] in repr(vars(r))] == []
    assert [r.getMessage() for r in caplog.records if STORED_EMAIL in repr(vars(r))] == []
    assert {table for table, _column in traces(STORED_EMAIL)} == {"users_user"}

    exporter.delete(f"{USERS_URL}{body['id']}/")
    assert traces(*needles(body["id"])) == {}


def test_an_answer_recorded_after_the_erase_committed_writes_nothing_that_names_the_recipient(
    exporter, delivery_settings, caplog
):
    # Given a greeting being sent when its recipient is erased
    body = exporter.post(USERS_URL, PERSON, format="json").json()
    make_due([Event.objects.get(user_id=body["id"])])
    Scheduler(once=True).run()
    [claimed] = deliveries_claim(worker="w1", limit=5, lease=timedelta(seconds=30))
    assert exporter.delete(f"{USERS_URL}{body['id']}/").status_code == 204
    caplog.set_level("INFO")

    # When the worker records the receiver's answer, which names them, after the erase committed
    now = timezone.now()
    summary = deliveries_record(
        worker="w1",
        results=[
            SendResult(
                delivery=claimed,
                outcome=AttemptOutcome.TRANSIENT_FAILURE,
                signal=Signal.FAILURE,
                started_at=now,
                finished_at=now,
                duration_ms=3,
                status_code=503,
                detail=ECHOING_REASON,
                response_excerpt="busy, Zephyrine Quackenbush",
            )
        ],
    )

    # Then the endpoint's health counts it, in words that name no one, and nothing else is written
    assert summary.lease_lost == 1
    endpoint = Endpoint.objects.get()
    assert (endpoint.consecutive_failures, endpoint.last_error) == (1, "HTTP 503 (Service Unavailable)")
    assert traces(*needles(body["id"])) == {}
    logged = [repr(vars(r)) for r in caplog.records]
    assert any("Lease lost" in line for line in logged)
    assert [line for line in logged if "Zephyrine" in line or "Quackenbush" in line] == []


def test_the_metrics_count_an_erased_recipients_attempts_still(
    client, settings, exporter, delivery_settings, sink
):
    settings.METRICS_TOKEN = ""
    body = greeted(exporter, sink)

    exporter.delete(f"{USERS_URL}{body['id']}/")

    text = client.get("/metrics").content.decode()
    assert 'birthday_delivery_attempts_last_hour{outcome="DELIVERED"} 1.0' in text
    assert 'birthday_delivery_attempts_last_hour{outcome="TRANSIENT_FAILURE"} 1.0' in text


def test_an_erased_recipients_attempts_go_with_the_history_after_the_retention(
    exporter, delivery_settings, sink
):
    body = greeted(exporter, sink)
    exporter.delete(f"{USERS_URL}{body['id']}/")
    DeliveryAttempt.objects.filter(number=1).update(finished_at=timezone.now() - timedelta(days=500))

    deleted = sum(
        batch.attempts for batch in history_prune_batches(cutoff=history_cutoff(now=timezone.now()))
    )

    assert deleted == 1
    assert list(DeliveryAttempt.objects.values_list("number", flat=True)) == [2]


def test_a_delivery_being_sent_when_its_recipient_is_erased_is_cancelled_and_its_outcome_writes_nothing(
    exporter, delivery_settings
):
    body = exporter.post(USERS_URL, PERSON, format="json").json()
    make_due([Event.objects.get(user_id=body["id"])])
    Scheduler(once=True).run()
    [claimed] = deliveries_claim(worker="w1", limit=5, lease=timedelta(seconds=30))

    assert exporter.delete(f"{USERS_URL}{body['id']}/").status_code == 204
    now = timezone.now()
    summary = deliveries_record(
        worker="w1",
        results=[
            SendResult(
                delivery=claimed,
                outcome=AttemptOutcome.DELIVERED,
                signal=Signal.SUCCESS,
                started_at=now,
                finished_at=now,
                duration_ms=3,
                status_code=200,
                response_excerpt="thanks, Zephyrine",
            )
        ],
    )

    assert (summary.delivered, summary.lease_lost) == (0, 1)
    assert not Delivery.objects.exists() and not DeliveryAttempt.objects.exists()
    assert traces(*needles(body["id"])) == {}


def test_a_recipient_erased_through_the_console_leaves_nothing_either(
    console, exporter, delivery_settings, sink
):
    body = greeted(exporter, sink, console)

    response = console.post(reverse("admin:users_user_delete", args=[body["id"]]), {"post": "yes"})

    assert response.status_code == 302
    assert traces(*needles(body["id"])) == {}


def test_an_erase_with_a_stale_if_match_changes_nothing(exporter):
    body = exporter.post(USERS_URL, PERSON, format="json").json()

    response = exporter.delete(f"{USERS_URL}{body['id']}/", HTTP_IF_MATCH='"7"')

    assert response.status_code == 412
    assert User.objects.filter(pk=body["id"]).exists() and Event.objects.filter(user_id=body["id"]).exists()


@pytest.mark.django_db(transaction=True)
def test_an_erase_beside_a_worker_recording_an_outcome_waits_for_it_instead_of_deadlocking(
    exporter, delivery_settings
):
    # A worker records an outcome as delivery.worker.record does: its delivery's row
    # first, then its event's, in one transaction. The erase must take them in that order.
    body = exporter.post(USERS_URL, PERSON, format="json").json()
    make_due([Event.objects.get(user_id=body["id"])])
    Scheduler(once=True).run()
    [claimed] = deliveries_claim(worker="w1", limit=5, lease=timedelta(seconds=30))
    holding, failures = threading.Event(), []

    def record() -> None:
        try:
            with transaction.atomic():
                Delivery.objects.filter(pk=claimed.id).update(
                    status="DELIVERED", locked_until=None, locked_by=""
                )
                holding.set()
                time.sleep(1.5)  # the erase is waiting by now, on one row or the other
                Event.objects.filter(pk=claimed.event_id).update(status=EventStatus.COMPLETED)
        except Exception as exc:  # reported below
            failures.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=record)
    worker.start()
    assert holding.wait(10)
    user_erase(user=User.objects.get(pk=body["id"]))
    worker.join(10)

    assert failures == []
    assert not Delivery.objects.exists() and not Event.objects.exists() and not User.objects.exists()


# --- an occurrence the erase cancelled, and the same person created again the same day ---------


def _zone_where_it_is_eleven() -> str:
    """A fixed-offset zone (Etc/GMT±N) where it is 11:00-11:59 now: past the 09:00 send time, in the window."""
    offset = (11 - timezone.now().hour + 12) % 24 - 12  # -12 … +11
    # POSIX signs: Etc/GMT-5 is UTC+5.
    return "Etc/UTC" if offset == 0 else f"Etc/GMT{'-' if offset > 0 else '+'}{abs(offset)}"


def _born_today(zone: str) -> str:
    from zoneinfo import ZoneInfo

    # 1992 was a leap year: any day, Feb 29 included, was someone's date of birth.
    return timezone.now().astimezone(ZoneInfo(zone)).date().replace(year=1992).isoformat()


def _cancelled_twice() -> dict:
    zone = _zone_where_it_is_eleven()
    return {
        "first_name": "Cancelled",
        "last_name": "Twice",
        "date_of_birth": _born_today(zone),
        "timezone": zone,
        "external_id": "cancel-2",
    }


def _greetings(sink) -> list[str]:
    return [r.body["message"] for r in sink.received if isinstance(r.body, dict) and "message" in r.body]


def test_an_occurrence_the_erase_cancelled_before_anything_was_sent_is_greeted_once_when_created_again(
    exporter, delivery_settings, sink
):
    # Given a paused destination, and a person whose birthday is today and whose send time has passed:
    # their delivery waits QUEUED, nothing sent.
    destination = destination_create(
        settings=DestinationSettings(name="paused", url=sink.url), operator="ops"
    ).destination
    destination_pause(destination=destination, operator="ops")
    first = exporter.post(USERS_URL, _cancelled_twice(), format="json").json()
    Scheduler(once=True).run()
    Worker(once=True).run()
    waiting = Delivery.objects.get()
    assert (waiting.status, waiting.attempts) == ("QUEUED", 0)
    today = waiting.event.occurrence_date.isoformat()

    # When they are erased, the destination resumed, and the same person created again the same day
    assert exporter.delete(f"{USERS_URL}{first['id']}/").status_code == 204
    destination_resume(destination=destination, operator="ops")
    again = exporter.post(USERS_URL, _cancelled_twice(), format="json").json()
    Scheduler(once=True).run()
    Worker(once=True).run()
    Scheduler(once=True).run()
    Worker(once=True).run()

    # Then today's greeting is theirs, once
    assert again["next_event"]["occurrence_date"] == today
    assert _greetings(sink) == ["Hey, Cancelled Twice it's your birthday"]
    assert Event.objects.get(user_id=again["id"], occurrence_date=today).status == EventStatus.COMPLETED
    assert not DeletedRecipientOccurrence.objects.exists()


def test_an_occurrence_whose_message_was_sent_before_the_erase_is_not_greeted_again_when_created_again(
    exporter, delivery_settings, sink
):
    # Given a person whose greeting went to a receiver that answered 503: it waits for a retry,
    # but the receiver may have shown it.
    destination = destination_create(
        settings=DestinationSettings(name="flaky", url=sink.url), operator="ops"
    ).destination
    first = exporter.post(USERS_URL, _cancelled_twice(), format="json").json()
    sink.script(first["next_event"]["idempotency_key"], Reply(status=503))
    Scheduler(once=True).run()
    Worker(once=True).run()
    sent = Delivery.objects.get(destination=destination)
    assert (sent.status, sent.attempts) == ("QUEUED", 1)
    today = sent.event.occurrence_date.isoformat()

    # When they are erased and created again the same day
    assert exporter.delete(f"{USERS_URL}{first['id']}/").status_code == 204
    again = exporter.post(USERS_URL, _cancelled_twice(), format="json").json()
    Scheduler(once=True).run()
    Worker(once=True).run()

    # Then the day counts as handled: next year's is next, nothing more is sent
    assert again["next_event"]["occurrence_date"] != today
    assert len(sink.received) == 1
    assert DeletedRecipientOccurrence.objects.count() == 1


def test_the_migration_rewrites_what_endpoints_kept_of_their_receivers_words_to_what_names_no_one():
    from django.apps import apps

    migration = importlib.import_module("delivery.migrations.0012_erasure_endpoint_last_error_names_no_one")
    kept = {
        "https://a.example/hook": (f"HTTP 503 ({ECHOING_REASON})", "HTTP 503 (Service Unavailable)"),
        "https://b.example/hook": ("HTTP 599 (Hey, Zephyrine)", "HTTP 599"),
        "https://c.example/hook": (
            "Connection error: 400, message='Bad status line Zephyrine'",
            "Connection error",
        ),
        "https://d.example/hook": ("Timed out after 10 s", "Timed out after 10 s"),
    }
    for url, (before, _after) in kept.items():
        Endpoint.objects.create(**endpoint_columns(url), last_error=before)

    migration.forward(apps, None)

    assert dict(Endpoint.objects.values_list("key", "last_error")) == {
        key_of(url): after for url, (_before, after) in kept.items()
    }
