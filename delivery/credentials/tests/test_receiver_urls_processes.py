"""Receiver URLs are credentials, for real: a run with token-bearing chat URLs shows no token anywhere but the reveal.

A scheduler and a worker process deliver to three local receivers at URLs shaped
like Slack's (`/services/T…/B…/<token>`), Discord's (`/api/webhooks/<id>/<token>`)
and a Teams Workflows trigger (`…?sig=<token>`); the Discord-shaped one fails for a
while (the failing and probing lines), one destination is paused, moved to a
new URL and resumed. Then the tokens are looked for in every log line of both
processes and of this one, in their `/metrics` and the web's, in what a
view-only account gets from the API and the console, and in every row the
delivery tables hold: nowhere. What is shown of each URL is all but its token.
"""

import logging
import secrets
import urllib.request
from ipaddress import ip_network

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from conftest import permissions_named
from delivery.destinations.fields import DestinationSettings
from delivery.destinations.services import (
    destination_create,
    destination_pause,
    destination_resume,
    destination_update,
)
from delivery.models import Delivery, DeliveryAttempt, Destination, Endpoint, EndpointState
from delivery.tests.pipeline import (
    ScriptedSink,
    create_due_users,
    process_env,
    settled,
    start_process,
    stop_all,
    wait_until,
)
from devtools.ports import free_port
from devtools.sink import Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

EVENTS = 20


def token() -> str:
    return secrets.token_urlsafe(24).replace("-", "x").replace("_", "y")


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return answer.read().decode()


def test_no_token_of_a_chat_url_shows_in_logs_metrics_api_console_or_rows(
    delivery_settings, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    delivery_settings.WEBHOOK_URL = ""
    delivery_settings.METRICS_TOKEN = ""
    delivery_settings.METRICS_ALLOWED_NETWORKS = [ip_network("127.0.0.1/32"), ip_network("::1/128")]
    delivery_settings.TRUSTED_PROXY_COUNT = 0
    tokens = {"slack": token(), "discord": token(), "workflows": token(), "moved": token()}
    with ScriptedSink() as slack_sink, ScriptedSink() as discord_sink, ScriptedSink() as teams_sink:
        base = {
            name: sink.url.removesuffix("/webhook")
            for name, sink in (("slack", slack_sink), ("discord", discord_sink), ("teams", teams_sink))
        }
        slack = destination_create(
            settings=DestinationSettings(
                name="team-slack",
                url=f"{base['slack']}/services/T0001/B0001/{tokens['slack']}",
                format="slack",
            ),
            operator="ops",
        ).destination
        destination_create(
            settings=DestinationSettings(
                name="team-discord",
                url=f"{base['discord']}/api/webhooks/123456789/{tokens['discord']}",
                format="discord",
            ),
            operator="ops",
        )
        destination_create(
            settings=DestinationSettings(
                name="team-teams",
                url=f"{base['teams']}/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01"
                f"&sig={tokens['workflows']}",
                format="teams",
            ),
            operator="ops",
        )
        # The Discord-shaped receiver fails first: the worker logs it failing, then probes it.
        discord_sink.default = Reply(status=503)
        # Paused, moved to a URL with another token, and resumed while the processes run.
        destination_pause(destination=slack, operator="ops")
        create_due_users(EVENTS)
        env = process_env(delivery_settings, ENDPOINT_FAILURE_THRESHOLD=2, ENDPOINT_PROBE_FIRST_INTERVAL="1s")
        ports = {"scheduler": free_port(), "worker": free_port()}
        processes = [
            start_process(
                ["run_scheduler", "--metrics-port", str(ports["scheduler"])], env, tmp_path / "scheduler.log"
            ),
            start_process(
                ["run_worker", "--metrics-port", str(ports["worker"])], env, tmp_path / "worker.log"
            ),
        ]
        try:
            wait_until(
                lambda: len(set(teams_sink.keys())) >= EVENTS, 60, "the Workflows receiver's greetings"
            )
            wait_until(
                lambda: Endpoint.objects.filter(state=EndpointState.FAILING).exists(),
                30,
                "a failing endpoint",
            )
            wait_until(
                lambda: "Probing failing endpoint" in (tmp_path / "worker.log").read_text(), 30, "a probe"
            )
            destination_update(
                destination=Destination.objects.get(name="team-slack"),
                operator="ops",
                changes={"url": f"{base['slack']}/services/T0001/B0002/{tokens['moved']}"},
            )
            destination_resume(destination=Destination.objects.get(name="team-slack"), operator="ops")
            discord_sink.default = Reply(status=200)
            wait_until(settled, 90, "every greeting delivered")
            metrics = [scrape(ports["scheduler"]), scrape(ports["worker"])]
        finally:
            exit_codes = stop_all(processes)
        assert exit_codes == [0, 0]

    # what a view-only account sees
    viewer = Destination._meta.apps.get_model("auth", "User").objects.create_user(
        username="viewer", password="s3cret-pass!", is_staff=True
    )
    viewer.user_permissions.set(
        permissions_named(
            "delivery.view_destination",
            "delivery.view_endpoint",
            "delivery.view_delivery",
            "scheduling.view_event",
            "users.view_user",
        )
    )
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=viewer).key}")
    console = Client()
    console.force_login(viewer)
    web = Client()
    delivery = Delivery.objects.filter(destination__name="team-discord").first()
    endpoint = Endpoint.objects.first()
    pages = [
        api.get("/api/v1/destinations/"),
        *[api.get(f"/api/v1/destinations/{pk}/") for pk in Destination.objects.values_list("pk", flat=True)],
        web.get("/metrics"),
        console.get(reverse("admin:dashboard")),
        console.get(reverse("admin:delivery_destination_changelist")),
        *[
            console.get(reverse("admin:delivery_destination_change", args=[pk]))
            for pk in Destination.objects.values_list("pk", flat=True)
        ],
        console.get(reverse("admin:delivery_endpoint_changelist")),
        console.get(reverse("admin:delivery_endpoint_change", args=[endpoint.pk])),
        console.get(reverse("admin:delivery_delivery_changelist")),
        console.get(reverse("admin:delivery_delivery_change", args=[delivery.pk])),
        console.get(reverse("admin:scheduling_event_change", args=[delivery.event_id])),
    ]
    for page in pages:
        assert page.status_code == 200, page.wsgi_request.path

    # then the tokens are nowhere: not in a log line, a metric, an answer, a page or a stored row
    logs = {path.name: path.read_text() for path in tmp_path.glob("*.log")}
    assert "Endpoint failing" in logs["worker.log"] and "Probing failing endpoint" in logs["worker.log"]
    texts = {
        **logs,
        "this process's log": caplog.text,
        "scheduler /metrics": metrics[0],
        "worker /metrics": metrics[1],
        **{f"{page.wsgi_request.path}": page.content.decode() for page in pages},
    }
    rows = [
        *Destination.objects.values(),
        *Endpoint.objects.values(),
        *Delivery.objects.values(),
        *DeliveryAttempt.objects.values(),
    ]
    # each URL shown as its kind shows it (all but the token), so the tokens above are the parts hidden
    listed = api.get("/api/v1/destinations/").content.decode()
    for shown in (
        "/services/T0001/B0002/…",
        "/api/webhooks/123456789/…",
        "/workflows/abc/triggers/manual/paths/invoke?api-version=2016-06-01&sig=…",
    ):
        assert shown in listed
    for name, secret in tokens.items():
        for where, text in texts.items():
            assert secret not in text, f"the {name} token in {where}"
        assert not [row for row in rows if secret in str(row)], f"the {name} token in a row"
    assert 'endpoint="team-discord"' in web.get("/metrics").content.decode()
