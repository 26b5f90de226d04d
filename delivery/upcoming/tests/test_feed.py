"""A destination's calendar feed, read back with a second parser (ics), not the library that wrote it."""

import logging
import re
from datetime import timedelta
from types import SimpleNamespace

import ics
import pytest
from django.utils import timezone
from gunicorn.config import Config as GunicornConfig

from config.gunicorn_logging import AccessLogger
from config.logging import RedactFeedTokens
from delivery.models import CalendarFeed
from delivery.upcoming.tests.helpers import born, destination, in_days
from users.models import CelebrationChoice
from users.services import user_erase

pytestmark = pytest.mark.django_db


def _issue(api_client, destination_id: int) -> str:
    response = api_client.post(f"/api/v1/destinations/{destination_id}/calendar-feed/")
    assert response.status_code == 201
    assert response["Cache-Control"] == "no-store"
    return response.json()["url"]


def _read(client, url: str) -> ics.Calendar:
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/calendar")
    assert response["Cache-Control"] == "no-store"
    assert response["Referrer-Policy"] == "no-referrer"
    return ics.Calendar(response.content.decode())


def test_the_feed_lists_whom_the_destination_may_announce_all_day_without_year_or_age(api_client, client):
    born(3, first="Ada", year=1915)
    born(5, first="Grace", last="Hopper", year=1906, labels=["contractor"])
    born(6, first="Paused", year=1970, paused_at=timezone.now(), paused_by="ops")
    private = born(7, first="Private", year=1980)
    CelebrationChoice.objects.create(user=private, event_type="BIRTHDAY", visibility="private")
    channel = destination("channel", excluded_labels=["contractor"])

    calendar = _read(client, _issue(api_client, channel.pk))

    (entry,) = calendar.events
    assert entry.name == "Ada Lovelace's birthday"
    assert entry.all_day
    assert entry.begin.date() == in_days(3)
    raw = client.get(_issue(api_client, channel.pk)).content.decode()
    assert "1915" not in raw
    assert not re.search(r"\b\d{1,3}(st|nd|rd|th)\b", raw)


def test_uids_are_stable_across_fetches_and_an_erased_person_is_gone_at_the_next(api_client, client):
    born(3, first="Ada")
    grace = born(4, first="Grace", last="Hopper")
    channel = destination("channel")
    url = _issue(api_client, channel.pk)

    first, second = _read(client, url), _read(client, url)
    user_erase(user=grace)
    third = _read(client, url)

    assert {e.uid for e in first.events} == {e.uid for e in second.events}
    assert len(first.events) == 2
    assert all("Ada" not in e.uid and "Grace" not in e.uid for e in first.events)
    assert [e.name for e in third.events] == ["Ada Lovelace's birthday"]
    assert {e.uid for e in third.events} < {e.uid for e in first.events}


def test_a_revoked_or_replaced_or_guessed_token_is_a_plain_404(api_client, client):
    channel = destination("channel")
    replaced = _issue(api_client, channel.pk)
    current = _issue(api_client, channel.pk)

    assert client.get(replaced).status_code == 404
    assert client.get(current).status_code == 200
    assert client.get(current.replace(".ics", "x.ics")).status_code == 404
    assert api_client.delete(f"/api/v1/destinations/{channel.pk}/calendar-feed/").status_code == 204
    assert client.get(current).status_code == 404
    assert api_client.delete(f"/api/v1/destinations/{channel.pk}/calendar-feed/").status_code == 404


def test_only_the_tokens_hash_is_stored(api_client):
    channel = destination("channel")
    url = _issue(api_client, channel.pk)
    token = url.rsplit("/", 1)[1].removesuffix(".ics")

    stored = CalendarFeed.objects.get(destination=channel)
    assert token not in stored.token_sha256
    assert re.fullmatch(r"[0-9a-f]{64}", stored.token_sha256)


def test_someone_who_leaves_the_audience_is_gone_at_the_next_fetch(api_client, client):
    ada = born(3, first="Ada", labels=["team:platform"])
    platform = destination("platform", audience_labels=["team:platform"])
    url = _issue(api_client, platform.pk)
    assert len(_read(client, url).events) == 1

    ada.labels = ["team:data"]
    ada.save()

    assert _read(client, url).events == set()


def test_someone_who_opts_out_of_the_destination_is_gone_at_the_next_fetch(api_client, client):
    from delivery.actions.optouts import destination_opt_out_set
    from scheduling.celebration import ChangedBy

    ada = born(3, first="Ada")
    born(4, first="Grace")
    general = destination("general")
    url = _issue(api_client, general.pk)
    assert len(_read(client, url).events) == 2

    destination_opt_out_set(user=ada, destination=general, opted_out=True, changed_by=ChangedBy.PERSON)

    assert [event.name for event in _read(client, url).events] == ["Grace Lovelace's birthday"]


def test_a_tokens_path_is_logged_redacted_by_django_and_by_gunicorns_access_log(client, caplog):
    token = "S3cr3t-token_of-a-feed"

    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.get(f"/api/v1/calendar/{token}.ics").status_code == 404

    # as the settings' console handler writes it, through its filters
    (handler,) = [
        h for h in logging.getLogger().handlers if any(isinstance(f, RedactFeedTokens) for f in h.filters)
    ]
    (record,) = [r for r in caplog.records if r.name == "django.request"]
    assert handler.filter(record)
    logged = handler.format(record)
    assert "/api/v1/calendar/[redacted].ics" in logged
    assert token not in logged
    environ = {
        "REQUEST_METHOD": "GET",
        "RAW_URI": f"/api/v1/calendar/{token}.ics",
        "PATH_INFO": f"/api/v1/calendar/{token}.ics",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_REFERER": f"https://example.org/api/v1/calendar/{token}.ics",
    }
    response = SimpleNamespace(status="404 Not Found", headers=[], sent=9)
    atoms = AccessLogger(GunicornConfig()).atoms(response, [], environ, timedelta(milliseconds=3))
    assert token not in f"{atoms['r']} {atoms['U']} {atoms['f']}"
    assert atoms["r"] == "GET /api/v1/calendar/[redacted].ics HTTP/1.1"
