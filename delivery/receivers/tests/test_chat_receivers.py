"""Chat destinations end to end: the worker sends to local receivers shaped like Slack, Discord and Teams Workflows.

Each receiver (kinds.tests.receivers) refuses what its service refuses (a
body of the wrong shape, Discord content over 2,000 characters, a card without
the Workflows wrapper), throttles as its service does (Discord's 429 with
`retry_after` in its JSON body), and counts the mentions and links what it
takes would render. A gone destination stops, shows, and comes back on Resume.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from datetime import date, timedelta
from ipaddress import ip_network

import pytest
from django.utils import timezone

from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import destination_create
from delivery.dispatch.scheduler import Scheduler
from delivery.models import Delivery, DeliveryAttempt, DeliveryStatus, Endpoint, EndpointState
from delivery.tests.pipeline import assert_rate_held, key_of, make_due
from delivery.worker.loop import Worker
from kinds.tests.receivers import (
    ShapedReceiver,
    discord_formats,
    discord_looks_like_a_mention,
    discord_receiver,
    slack_formats,
    slack_receiver,
    teams_receiver,
)
from scheduling.models import Event, EventStatus

pytestmark = pytest.mark.django_db

# What recipients created through the API can be called, each within the API's 100 characters.
HOSTILE_NAMES = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<@U024BE7LH>",
    "<https://evil.example|click here>",
    "@everyone",
    "@here",
    "<@123456789012345678>",
    "<@&987654321>",
    "**Boom** _it_ ~~x~~ `c` ||s||",
    "[click](https://evil.example)",
    "# Heading",
    "> quote",
    "\u202eevil\u202c",
    "&lt;!channel&gt;",
    "\\<@1> \\@everyone",
    "<at>Everyone</at>",
    "x" * 100,
]


def work_until(condition, *, timeout: float = 60.0) -> None:
    """Run the worker (--once) until `condition()` holds: a wait the receiver asked for is a later run's work."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the deliveries did not settle in time"
        Worker(once=True).run()
        time.sleep(0.05)


def all_ended() -> bool:
    return not Delivery.objects.filter(status__in=[DeliveryStatus.QUEUED, DeliveryStatus.SENDING]).exists()


def greet_today(api_client, names: list[str]) -> None:
    """Recipients created through the API with these first names, their birthday's greeting due now."""
    today = timezone.now().date()
    for number, name in enumerate(names):
        response = api_client.post(
            "/api/v1/users/",
            {
                "first_name": name,
                "last_name": "Ping",
                "date_of_birth": date(1990, today.month, min(today.day, 28)).isoformat(),
                "timezone": "UTC",
                "external_id": f"hostile-{number}",
            },
            format="json",
        )
        assert response.status_code == 201, response.content
    make_due(list(Event.objects.filter(status=EventStatus.PENDING, event_type="BIRTHDAY")))
    Scheduler(once=True).run()


@pytest.fixture
def chat(delivery_settings):
    delivery_settings.WEBHOOK_URL = ""
    with ExitStack() as stack:
        yield lambda receiver: stack.enter_context(receiver)


def destination_at(receiver: ShapedReceiver, format_: str, **fields):
    return destination_create(
        settings=DestinationSettings(name=format_, url=receiver.url, format=format_, **fields), operator="ops"
    ).destination


def test_hostile_names_reach_slack_discord_and_teams_mentioning_linking_and_formatting_nothing(
    api_client, chat
):
    # given a Slack, a Discord and a Teams Workflows receiver, each its own destination
    receivers = {
        "slack": chat(slack_receiver()),
        "discord": chat(discord_receiver()),
        "teams": chat(teams_receiver()),
    }
    for format_, receiver in receivers.items():
        # A rate of the operator's own, above the services' paces, so the test does not wait on them.
        destination_at(receiver, format_, max_rate=50)

    # when recipients named to attack each format are greeted
    greet_today(api_client, HOSTILE_NAMES)
    work_until(all_ended)

    # then every service took every greeting, and none of them mentions, links or formats anything
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    for format_, receiver in receivers.items():
        assert len(receiver.taken) == len(HOSTILE_NAMES), (format_, receiver.refused)
        assert receiver.refused == []
        assert sum(j.mentions for j in receiver.taken) == 0, format_
        assert sum(j.links for j in receiver.taken) == 0, format_
        shown = "\n".join(j.shown for j in receiver.taken)
        assert "Hey, <!channel> Ping it's your birthday" in shown or format_ != "slack"
    slack_bodies = [r.raw_body for r in receivers["slack"].received]
    discord_bodies = [r.raw_body for r in receivers["discord"].received]
    assert not any(slack_formats(raw) for raw in slack_bodies)
    assert not any(discord_looks_like_a_mention(raw) or discord_formats(raw) for raw in discord_bodies)
    assert all(r.body["allowed_mentions"] == {"parse": []} for r in receivers["discord"].received)
    # what a person reads is the name as written (less the characters that reorder text)
    assert any("@everyone Ping" in j.shown.replace("\u200b", "") for j in receivers["discord"].taken)
    assert any("**Boom** _it_" in j.shown for j in receivers["teams"].taken)


def test_a_workflows_flow_would_fail_on_the_legacy_message_card_which_only_its_own_format_sends(
    api_client, chat
):
    # given a Workflows webhook, mistakenly set to the legacy MessageCard format
    receiver = chat(teams_receiver())
    destination_at(receiver, "teams_messagecard", max_rate=50)

    greet_today(api_client, ["Ada"])
    work_until(all_ended)

    # then the webhook answered 202 (DELIVERED, as the service says), and its flow failed on the card:
    # which is why `teams` sends the Adaptive Card
    assert Delivery.objects.get().status == DeliveryStatus.DELIVERED
    assert receiver.taken == [] and len(receiver.refused) == 1
    assert b"foreach" in receiver.refused[0].body


def test_discords_429_with_retry_after_in_its_json_body_is_waited_out_and_nothing_is_lost(api_client, chat):
    # given a Discord webhook limited as Discord limits one (5 per 2 s), and an operator's
    # max_rate well above it
    receiver = chat(discord_receiver(rate=2.5, burst=5))
    destination_at(receiver, "discord", max_rate=20)
    names = [f"Name{number}" for number in range(12)]

    greet_today(api_client, names)
    work_until(all_ended)

    # then it answered 429s with its wait in the JSON body, and every greeting arrived once, none dead
    assert receiver.throttles > 0
    assert len(receiver.taken) == len(names)
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    throttled = DeliveryAttempt.objects.filter(status_code=429)
    assert throttled.exists()
    assert all(b'"retry_after"' in a.response_excerpt.encode() for a in throttled)


@pytest.mark.parametrize(
    ("format_", "make", "rate", "count"),
    [
        ("discord", discord_receiver, 2.5, 10),
        ("teams", teams_receiver, 4.0, 12),
        ("slack", slack_receiver, 1.0, 4),
    ],
)
def test_a_chat_destination_without_a_max_rate_keeps_to_its_services_pace_and_is_never_throttled(
    api_client, chat, format_, make, rate, count
):
    # given a receiver that refuses what goes beyond its service's published pace
    # (a bucket of two, for a request that arrives a little early)
    receiver = chat(make(rate=rate, burst=2))
    destination_at(receiver, format_)

    greet_today(api_client, [f"Name{number}" for number in range(count)])
    work_until(all_ended)

    assert receiver.throttles == 0
    assert len(receiver.taken) == count


def test_webhook_max_rate_below_a_services_pace_still_holds(api_client, chat, delivery_settings):
    delivery_settings.WEBHOOK_MAX_RATE = 2.0
    receiver = chat(teams_receiver())
    destination_at(receiver, "teams")

    greet_today(api_client, [f"Name{number}" for number in range(6)])
    started = time.monotonic()
    work_until(all_ended)

    # 6 requests at 2 a second: no calendar second holds more than 2, so they span three seconds
    assert_rate_held(receiver.received, rate=2.0)
    arrivals = sorted(r.received_at for r in receiver.received)
    assert len(arrivals) == 6
    assert arrivals[-1] - arrivals[0] >= 2.0
    assert time.monotonic() - started >= 2.0


# --- gone -------------------------------------------------------------------------------------------------


@pytest.fixture
def metrics_settings(settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_NETWORKS = [ip_network("127.0.0.1/32"), ip_network("::1/128")]
    settings.TRUSTED_PROXY_COUNT = 0
    return settings


@pytest.mark.parametrize("make", [slack_receiver, discord_receiver, teams_receiver])
def test_a_gone_destination_stops_shows_gone_everywhere_and_resume_sends_its_backlog_once(
    api_client, chat, console, client, metrics_settings, make
):
    # given a chat destination whose webhook was deleted at the service
    receiver = chat(make())
    receiver.gone = True
    format_ = {slack_receiver: "slack", discord_receiver: "discord", teams_receiver: "teams"}[make]
    destination = destination_at(receiver, format_, max_rate=50)
    names = [f"Name{number}" for number in range(5)]
    greet_today(api_client, names)

    # when the worker sends
    Worker(once=True).run()
    Worker(once=True).run()

    # then the endpoint is GONE, the deliveries wait without having spent an attempt, and no more is sent
    endpoint = Endpoint.objects.get(key=key_of(receiver.url))
    assert endpoint.state == EndpointState.GONE
    tried = len(receiver.received)
    assert 1 <= tried <= len(names)
    deliveries = list(Delivery.objects.all())
    assert {d.status for d in deliveries} == {DeliveryStatus.QUEUED}
    assert all(d.max_attempts - d.attempts == delivery_settings_max_attempts() for d in deliveries)
    Worker(once=True).run()
    assert len(receiver.received) == tried

    # and it shows: the API, the console's Endpoints page, the metrics
    answer = api_client.get(f"/api/v1/destinations/{destination.pk}/").json()
    assert answer["endpoint_state"] == "GONE"
    page = console.get(f"/admin/delivery/endpoint/{endpoint.pk}/change/").content.decode()
    assert 'id="endpoint-gone"' in page and 'id="endpoint-resume"' in page
    assert endpoint.last_error.split("(")[-1].rstrip(")") in page
    metrics = client.get("/metrics").content.decode()
    assert any(
        line.startswith("birthday_endpoint_state{") and 'state="GONE"' in line and line.endswith(" 1.0")
        for line in metrics.splitlines()
    )

    # when the operator has fixed it at the service and resumes it
    receiver.gone = False
    resumed = api_client.post(f"/api/v1/destinations/{destination.pk}/resume/")
    assert resumed.status_code == 200, resumed.content
    assert resumed.json()["endpoint_state"] == "HEALTHY"
    work_until(all_ended)

    # then the backlog goes, each greeting once
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}
    assert len(receiver.taken) == len(names)


def delivery_settings_max_attempts() -> int:
    from django.conf import settings

    return settings.DELIVERY_MAX_ATTEMPTS


def test_a_gone_destination_given_a_new_url_sends_there_and_the_old_url_raises_no_alert(api_client, chat):
    old, new = chat(slack_receiver()), chat(slack_receiver())
    old.gone = True
    destination = destination_at(old, "slack", max_rate=50)
    greet_today(api_client, ["Ada", "Grace"])
    Worker(once=True).run()
    assert Endpoint.objects.get(key=key_of(old.url)).state == EndpointState.GONE

    # when the operator makes a new webhook and gives the destination its URL
    changed = api_client.patch(f"/api/v1/destinations/{destination.pk}/", {"url": new.url}, format="json")
    assert changed.status_code == 200, changed.content
    work_until(all_ended)

    # then the backlog went to the new URL, and the old endpoint is no longer gone: nothing unsent
    # names it any more, so its row went with the old receiver (destination_endpoint_move)
    assert len(new.taken) == 2
    assert not Endpoint.objects.filter(key=key_of(old.url)).exists()
    assert not Endpoint.objects.filter(state=EndpointState.GONE).exists()
    assert set(Delivery.objects.values_list("status", flat=True)) == {DeliveryStatus.DELIVERED}


def test_a_gone_destinations_deliveries_are_given_up_after_the_lateness_like_a_paused_ones(
    api_client, chat, delivery_settings
):
    receiver = chat(discord_receiver())
    receiver.gone = True
    destination_at(receiver, "discord", max_rate=50)
    greet_today(api_client, ["Ada"])
    Worker(once=True).run()
    assert Endpoint.objects.get(key=key_of(receiver.url)).state == EndpointState.GONE

    delivery_settings.EVENT_MAX_LATENESS = timedelta(seconds=1)
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Delivery.objects.update(created_at=an_hour_ago, next_attempt_at=an_hour_ago)
    from delivery.worker.expiry import deliveries_expire_late

    deliveries_expire_late(now=timezone.now())

    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.DEAD
    assert "EVENT_MAX_LATENESS" in delivery.last_error
