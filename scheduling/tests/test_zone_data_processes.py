"""The product's processes under two time zone databases: IANA 2023d, then the machine's.

Real processes (gunicorn, run_scheduler) on this test's database; the older
database reaches them as an operator would give it: PYTHONTZPATH (and the
older tzdata package on PYTHONPATH, so nothing falls back to the newer one).
"""

import json
import os
from datetime import UTC, datetime
from datetime import time as clock

import pytest
from rest_framework.authtoken.models import Token

from delivery.tests.pipeline import process_env, start_process, stop_all, wait_until
from scheduling import zonedata
from scheduling.models import Event, EventStatus, EventZoneData
from scheduling.tests.conftest import OLD_VERSION, old_zone_env
from users.tests.live_api import api_server, request

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def post_recipient(port: int, token: str, zone: str, born: str = "1990-06-15") -> tuple[int, dict]:
    status, _, body = request(
        port,
        token,
        "POST",
        "/api/v1/users/",
        {"first_name": "Aigerim", "last_name": "Nurlanova", "date_of_birth": born, "timezone": zone},
    )
    return status, json.loads(body)


def birthday(user_id) -> Event:
    return Event.objects.get(user_id=user_id, status=EventStatus.PENDING)


def at(event: Event, hour: int) -> datetime:
    return datetime.combine(event.occurrence_date, clock(hour), tzinfo=UTC)


def scheduler_once(env: dict, log_path) -> str:
    process = start_process(["run_scheduler", "--once"], env, log_path)
    assert process.wait(timeout=60) == 0, log_path.read_text()
    return log_path.read_text()


@pytest.fixture
def token(operator) -> str:
    return Token.objects.create(user=operator).key


@pytest.fixture
def env(settings) -> dict:
    """A product process's environment with the machine's time zone database (nothing pending is due)."""
    settings.WEBHOOK_URL = "http://127.0.0.1:9/hook"
    environment = process_env(settings)
    environment.pop("PYTHONTZPATH", None)
    return environment


def test_a_scheduler_with_a_newer_database_moves_what_one_with_the_older_scheduled(
    env, old_tzdata, token, tmp_path
):
    # given two Almaty recipients created through the API under 2023d, one of them claimed since;
    # and a zone 2023d does not know, refused
    old = old_zone_env(env, old_tzdata)
    with api_server(env=old, log_path=tmp_path / "api-old.log", workers=1, threads=2) as port:
        created, body = post_recipient(port, token, "Asia/Almaty")
        claimed_status, claimed_body = post_recipient(port, token, "Asia/Almaty", born="1985-06-16")
        refused, refusal = post_recipient(port, token, "America/Coyhaique")
    assert (created, claimed_status, refused) == (201, 201, 400), (body, claimed_body, refusal)
    assert "timezone" in refusal
    assert f"Time zone data {OLD_VERSION}" in scheduler_once(old, tmp_path / "scheduler-old.log")
    before = birthday(body["id"])
    assert before.target_timestamp_utc == at(before, 3)
    assert EventZoneData.objects.get().version == OLD_VERSION
    Event.objects.filter(user_id=claimed_body["id"]).update(status=EventStatus.PROCESSING)
    claimed = Event.objects.values().get(user_id=claimed_body["id"], status=EventStatus.PROCESSING)

    # when a scheduler runs with the machine's database
    log = scheduler_once(env, tmp_path / "scheduler-new.log")

    # then the pending event is at 09:00 Almaty time by the new rules, same occurrence and key
    after = birthday(body["id"])
    assert after.target_timestamp_utc == at(before, 4)
    assert (after.occurrence_date, after.idempotency_key) == (before.occurrence_date, before.idempotency_key)
    assert after.status == EventStatus.PENDING
    # and the claimed one is as it was
    assert Event.objects.values().get(user_id=claimed_body["id"], status=EventStatus.PROCESSING) == claimed
    current = zonedata.zone_data_version()
    assert f"Every PENDING event follows time zone data {current}: 1 moved, Asia/Almaty 1" in log
    assert EventZoneData.objects.get().version == current
    # and the API under the machine's database knows America/Coyhaique
    with api_server(env=env, log_path=tmp_path / "api-new.log", workers=1, threads=2) as port:
        accepted, body = post_recipient(port, token, "America/Coyhaique")
    assert accepted == 201, body


def test_running_processes_follow_an_update_of_the_zone_files_without_a_restart(
    env, old_tzdata, token, tmp_path
):
    # given a scheduler and the API running on a zone directory that holds 2023d
    zones = tmp_path / "zoneinfo"
    zones.symlink_to(old_tzdata / "tzdata" / "zoneinfo")
    running = {**old_zone_env(env, old_tzdata), "PYTHONTZPATH": str(zones)}
    scheduler = start_process(["run_scheduler"], running, tmp_path / "scheduler.log")
    try:
        with api_server(env=running, log_path=tmp_path / "api.log", workers=1, threads=2) as port:
            created, body = post_recipient(port, token, "Asia/Almaty")
            assert post_recipient(port, token, "America/Coyhaique")[0] == 400
            wait_until(
                lambda: EventZoneData.objects.filter(version=OLD_VERSION).exists(), 30, "the first look"
            )
            before = birthday(body["id"])
            assert before.target_timestamp_utc == at(before, 3)

            # when the directory is replaced by the machine's database, as a package upgrade does
            (tmp_path / "next").symlink_to(zonedata.zone_data().path)
            os.replace(tmp_path / "next", zones)

            # then the scheduler moves the event to 04:00Z with the same key, without a restart
            wait_until(
                lambda: birthday(body["id"]).target_timestamp_utc == at(before, 4), 30, "the event to move"
            )
            assert birthday(body["id"]).idempotency_key == before.idempotency_key
            # and the API accepts the new zone, and schedules a new Almaty recipient by the new rules
            wait_until(lambda: post_recipient(port, token, "America/Coyhaique")[0] == 201, 10, "the new zone")
            created, body = post_recipient(port, token, "Asia/Almaty", born="1985-06-16")
            assert created == 201
            event = birthday(body["id"])
            assert event.target_timestamp_utc == at(event, 4)
    finally:
        codes = stop_all([scheduler])
    log = (tmp_path / "scheduler.log").read_text()
    assert codes == [0], log
    assert f"Time zone data changed from {OLD_VERSION} to {zonedata.zone_data_version()}" in log
    assert "1 moved, Asia/Almaty 1" in log
