"""Every reader of attempts shows the same attempts however they were recorded (issue 48).

A success writes no attempt row (delivery.worker.record): its delivery's columns are its
attempt, and every reader reads them through delivery.selectors.delivery_attempts. This
builds one history of every kind (first-try successes, a retried success, a dead delivery,
an erased recipient, a recovered delivery), through the API, the scheduler, the worker and
a real local receiver, and compares what the export, the console (the delivery's page, its
filter, the dashboard's counts, the erasure's confirmation), the API's failures and the
metrics show with what they showed when every attempt was a row: the expectations below
were recorded by running this test against 1838f6b, whose attempt log has a row per
attempt as a43893e's does.
"""

from collections import Counter
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from delivery.actions.recovery import recoveries_advance, recovery_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus, Destination
from delivery.selectors import attempt_outcome_counts, delivery_outcome_counts, recipients_attempt_count
from delivery.tests.pipeline import make_due
from delivery.worker.loop import Worker
from devtools.sink import Reply
from scheduling.models import Event

pytestmark = pytest.mark.django_db

USERS_URL = "/api/v1/users/"
OUTCOME_LABELS = (
    "Delivered",
    "Failed: tried again",
    "Refused: not tried again",
    "Abandoned by a lost worker",
)

# Each recipient's answers from the receiver, in order.
ANSWERS = {
    "Ada": [Reply(status=200, body=b"")],  # a first-try success, and the receiver says nothing
    "Bea": [Reply(status=503, body=b"busy, Bea"), Reply(status=200, body=b'{"stored": "Bea"}')],  # retried
    "Cy": [Reply(status=400, body=b'{"error": "no Cy here"}')],  # dead at once
    "Dora": [Reply(status=200, body=b'{"stored": "Dora"}')],  # a first-try success, then erased
    "Eve": [
        Reply(status=200, body=b'{"stored": "Eve"}'),
        Reply(status=201, body=b'{"again": "Eve"}'),
    ],  # recovered
}


@pytest.fixture
def reader(api_client, operator):
    operator.user_permissions.add(*Permission.objects.filter(codename="view_delivery"))
    return api_client


def person(name: str) -> dict:
    return {
        "first_name": name,
        "last_name": "Mixed",
        "date_of_birth": "1990-05-05",
        "timezone": "Europe/London",
        "external_id": f"mixed-{name}",
    }


def send_due(names, ids, sink) -> None:
    events = list(Event.objects.filter(user_id__in=[ids[n] for n in names]))
    for event in events:
        name = next(n for n in names if str(ids[n]) == str(event.user_id))
        sink.script(event.idempotency_key, *ANSWERS[name])
    make_due(events)
    Scheduler(once=True).run()
    Worker(once=True).run()


def mixed_history(reader, sink) -> dict[str, str]:
    """The five recipients' history, as the module's docstring says; their ids by name (Dora's erased)."""
    ids = {name: reader.post(USERS_URL, person(name), format="json").json()["id"] for name in ANSWERS}
    # Eve first, alone: the recovery's window holds her delivery only.
    since = timezone.now() - timedelta(seconds=1)
    send_due(["Eve"], ids, sink)
    until = timezone.now()
    send_due(["Ada", "Bea", "Cy", "Dora"], ids, sink)
    Delivery.objects.filter(status=DeliveryStatus.QUEUED).update(next_attempt_at=timezone.now())
    Worker(once=True).run()  # Bea's second attempt
    recovery_create(
        destination=Destination.objects.get(),
        operator="ops",
        states=[DeliveryStatus.DELIVERED],
        since=since,
        until=until,
    )
    assert recoveries_advance() is not None
    Worker(once=True).run()  # Eve's again
    assert reader.delete(f"{USERS_URL}{ids['Dora']}/").status_code == 204
    return ids


def attempts_exported(reader, user_id: str) -> list[tuple]:
    export = reader.get(f"{USERS_URL}{user_id}/export/").json()
    [delivery] = export["deliveries"]
    shown = []
    for a in delivery["attempt_log"]:
        assert a["started_at"] and a["finished_at"] and a["duration_ms"] >= 0
        shown.append(
            (
                a["number"],
                a["outcome"],
                a["status_code"],
                a["error"],
                a["response_excerpt"],
                bool(a["worker"]),
            )
        )
    return shown


def console_page(console, user_id: str) -> tuple[dict[str, int], list[str]]:
    """The delivery's page: how often each outcome's label appears (its status badge among them), and which of
    the receiver's answers it quotes."""
    delivery = Delivery.objects.get(event__user_id=user_id)
    html = console.get(reverse("admin:delivery_delivery_change", args=[delivery.pk])).content.decode()
    quoted = [
        r.body.decode()
        for answers in ANSWERS.values()
        for r in answers
        if r.body and r.body.decode().replace('"', "&quot;") in html
    ]
    return {label: html.count(f">{label}<") for label in OUTCOME_LABELS}, quoted


def console_filter(console, ids: dict[str, str]) -> dict[str, list[str]]:
    names = {str(user_id): name for name, user_id in ids.items()}
    listed = {}
    for outcome in ("DELIVERED", "TRANSIENT_FAILURE", "PERMANENT_FAILURE", "ABANDONED"):
        response = console.get(reverse("admin:delivery_delivery_changelist"), {"attempt_outcome": outcome})
        listed[outcome] = sorted(names[str(d.event.user_id)] for d in response.context["cl"].result_list)
    return listed


def test_console_api_export_and_metrics_show_the_attempts_every_attempt_row_showed(
    reader, delivery_settings, sink, console
):
    start = timezone.now()
    ids = mixed_history(reader, sink)
    alive = [name for name in ANSWERS if name != "Dora"]

    assert {name: attempts_exported(reader, ids[name]) for name in alive} == {
        "Ada": [(1, "DELIVERED", 200, "", "", True)],
        "Bea": [
            (1, "TRANSIENT_FAILURE", 503, "Service Unavailable", "busy, Bea", True),
            (2, "DELIVERED", 200, "", '{"stored": "Bea"}', True),
        ],
        "Cy": [(1, "PERMANENT_FAILURE", 400, "Bad Request", '{"error": "no Cy here"}', True)],
        "Eve": [
            (1, "DELIVERED", 200, "", '{"stored": "Eve"}', True),
            (2, "DELIVERED", 201, "", '{"again": "Eve"}', True),
        ],
    }
    # The erased recipient's attempt stays, naming no one.
    assert list(
        DeliveryAttempt.objects.filter(delivery=None).values_list(
            "number", "outcome", "status_code", "error", "response_excerpt"
        )
    ) == [(1, "DELIVERED", 200, "", "")]

    assert {name: console_page(console, ids[name]) for name in alive} == {
        "Ada": (
            {
                "Delivered": 2,
                "Failed: tried again": 0,
                "Refused: not tried again": 0,
                "Abandoned by a lost worker": 0,
            },
            [],
        ),
        "Bea": (
            {
                "Delivered": 2,
                "Failed: tried again": 1,
                "Refused: not tried again": 0,
                "Abandoned by a lost worker": 0,
            },
            ["busy, Bea", '{"stored": "Bea"}'],
        ),
        "Cy": (
            {
                "Delivered": 0,
                "Failed: tried again": 0,
                "Refused: not tried again": 1,
                "Abandoned by a lost worker": 0,
            },
            ['{"error": "no Cy here"}'],
        ),
        "Eve": (
            {
                "Delivered": 3,
                "Failed: tried again": 0,
                "Refused: not tried again": 0,
                "Abandoned by a lost worker": 0,
            },
            ['{"stored": "Eve"}', '{"again": "Eve"}'],
        ),
    }
    assert console_filter(console, ids) == {
        "DELIVERED": ["Ada", "Bea", "Eve"],
        "TRANSIENT_FAILURE": ["Bea"],
        "PERMANENT_FAILURE": ["Cy"],
        "ABANDONED": [],
    }
    assert {name: recipients_attempt_count(user_ids=[ids[name]]) for name in alive} == {
        "Ada": 1,
        "Bea": 2,
        "Cy": 1,
        "Eve": 2,
    }
    assert attempt_outcome_counts(since=start) == {
        "DELIVERED": 5,
        "TRANSIENT_FAILURE": 1,
        "PERMANENT_FAILURE": 1,
        "ABANDONED": 0,
    }
    outcomes = delivery_outcome_counts(now=timezone.now())
    assert (outcomes["attempts_day"], outcomes["failed_attempts_day"]) == (7, 2)
    assert (outcomes["attempts_hour"], outcomes["failed_attempts_hour"]) == (7, 2)
    # The failures pages read the dead deliveries, whose failed attempts are rows as before.
    failures = reader.get("/api/v1/failures/").json()
    assert [(group["cause"], group["count"]) for group in failures] == [("http_400", 1)]

    # How they are kept now: a success's attempt on its delivery, a row once it was queued again or erased.
    rows = Counter(DeliveryAttempt.objects.values_list("delivery__event__user__first_name", "outcome"))
    assert rows == Counter(
        {
            ("Bea", "TRANSIENT_FAILURE"): 1,
            ("Cy", "PERMANENT_FAILURE"): 1,
            ("Eve", "DELIVERED"): 1,  # the first success, written down by the recovery
            (None, "DELIVERED"): 1,  # Dora's, written down by the erasure, naming no one
        }
    )
