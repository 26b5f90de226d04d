"""Fan-out for real: one scheduler and two worker processes, three destinations at three real receivers.

Counted per destination at its receiver: every occurrence arrives at each, none
is accepted twice, and a receiver failing for a while holds back nobody else.
"""

import time
from collections import Counter

import pytest
from standardwebhooks.webhooks import Webhook

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.models import Delivery, DeliveryStatus
from delivery.tests.pipeline import (
    LOCAL_CHAT_RATE,
    ScriptedSink,
    assert_each_receiver_accepted_each_key_once,
    assert_every_delivery_delivered_and_event_completed,
    assert_rate_held,
    create_due_users,
    process_env,
    settled,
    start_process,
    stop_all,
    wait_until,
)
from devtools.sink import Reply
from scheduling.models import Event, EventStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EVENTS = 300


def test_three_destinations_each_get_every_occurrence_once_while_one_fails_for_a_while(
    delivery_settings, tmp_path
):
    # given three receivers, the chat one answering 500 for the first seconds, and no WEBHOOK_URL to seed from
    delivery_settings.WEBHOOK_URL = ""
    with ScriptedSink() as crm_sink, ScriptedSink() as chat_sink, ScriptedSink() as hr_sink:
        chat_sink.default = Reply(status=500)
        crm = destination_create(settings=DestinationSettings(name="crm", url=crm_sink.url), operator="ops")
        # Local sinks, not the services: no service's pace to keep to (conftest.LOCAL_CHAT_RATE).
        destination_create(
            settings=DestinationSettings(
                name="chat", url=chat_sink.url, format="slack", max_rate=LOCAL_CHAT_RATE
            ),
            operator="ops",
        )
        destination_create(
            settings=DestinationSettings(
                name="hr", url=hr_sink.url, format="teams", max_rate=LOCAL_CHAT_RATE
            ),
            operator="ops",
        )
        create_due_users(EVENTS)
        keys = set(Event.objects.filter(status=EventStatus.PENDING).values_list("idempotency_key", flat=True))
        # Attempts spent before the endpoint counts as failing are not what this test is about.
        env = process_env(delivery_settings, DELIVERY_MAX_ATTEMPTS=50)
        processes = [start_process(["run_scheduler", "--batch-size", "100"], env, tmp_path / "scheduler.log")]
        processes += [
            start_process(["run_worker", "--batch-size", "50"], env, tmp_path / f"worker{i}.log")
            for i in range(2)
        ]
        try:
            # when the others have everything while the chat receiver still fails
            assert crm_sink.wait_for(EVENTS, timeout=120), f"crm got {len(set(crm_sink.keys()))}"
            assert hr_sink.wait_for(EVENTS, timeout=60), f"hr got {len(set(hr_sink.keys()))}"
            assert not chat_sink.accepted()
            time.sleep(1)
            chat_sink.default = Reply(status=200)
            # then the chat receiver, once it answers, gets its backlog too
            wait_until(lambda: len(chat_sink.accepted()) == EVENTS, 120, "the chat backlog to drain")
            wait_until(settled, 60, "every outcome to be recorded")
        finally:
            exit_codes = stop_all(processes)

        assert exit_codes == [0, 0, 0]
        assert_each_receiver_accepted_each_key_once((crm_sink, chat_sink, hr_sink), keys)
        assert_every_delivery_delivered_and_event_completed(events=EVENTS, destinations=3)
        assert chat_sink.received[-1].body["text"].startswith("Hey, ")
        assert hr_sink.received[0].body["attachments"][0]["content"]["type"] == "AdaptiveCard"
        request = crm_sink.received[0]
        assert Webhook(crm.value).verify(request.raw_body, dict(request.headers.items()))["message"]
        # The processes decrypted and used the secret; none of them wrote it to a log line.
        for log in tmp_path.glob("*.log"):
            assert crm.value.removeprefix("whsec_") not in log.read_text(), log.name


def test_one_destinations_max_rate_holds_over_two_workers_and_slows_no_other(delivery_settings, tmp_path):
    # given two receivers: the chat one limited to 40 requests/s, the other not at all
    delivery_settings.WEBHOOK_URL = ""
    count = 300
    with ScriptedSink() as crm_sink, ScriptedSink() as chat_sink:
        destination_create(settings=DestinationSettings(name="crm", url=crm_sink.url), operator="ops")
        destination_create(
            settings=DestinationSettings(name="chat", url=chat_sink.url, format="slack", max_rate=40),
            operator="ops",
        )
        create_due_users(count)
        env = process_env(delivery_settings)
        processes = [start_process(["run_scheduler"], env, tmp_path / "scheduler.log")]
        processes += [start_process(["run_worker"], env, tmp_path / f"worker{i}.log") for i in range(2)]
        try:
            # when the fleet sends: the unlimited receiver has everything long before the limited one
            assert crm_sink.wait_for(count, timeout=60), f"crm got {len(set(crm_sink.keys()))}"
            assert len(set(chat_sink.keys())) < count
            assert chat_sink.wait_for(count, timeout=60), f"chat got {len(set(chat_sink.keys()))}"
            wait_until(
                lambda: not Delivery.objects.exclude(status=DeliveryStatus.DELIVERED).exists(),
                30,
                "every outcome",
            )
        finally:
            exit_codes = stop_all(processes)

        # then the limited receiver never saw more than its rate, over both workers, and the rate was used
        assert exit_codes == [0, 0, 0]
        assert_rate_held(chat_sink.received, rate=40, used=30)
        assert max(Counter(chat_sink.keys()).values()) == max(Counter(crm_sink.keys()).values()) == 1
