"""Recipients as people, end to end: real run_scheduler and run_worker processes, a real receiver, the API.

The clock is the machine's: the recipients' zones are chosen so that it is the
local time each test needs.
"""

import time
from datetime import UTC, date, datetime, timedelta

import pytest

from delivery.models import Delivery, DeliveryAttempt, Endpoint
from delivery.tests.pipeline import process_env, start_process, stop_all, wait_until
from devtools.sink import Reply
from scheduling.models import Event, EventStatus
from users.tests.traces import traces

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

USERS_URL = "/api/v1/users/"


def zone_where_it_is(hour: int) -> str:
    """A fixed-offset IANA zone (Etc/GMT±N) where the local hour is now `hour`."""
    offset = (hour - datetime.now(UTC).hour + 12) % 24 - 12  # -12 … +11
    # POSIX signs: Etc/GMT-5 is UTC+5.
    return "Etc/UTC" if offset == 0 else f"Etc/GMT{'-' if offset > 0 else '+'}{abs(offset)}"


def local_today(zone: str) -> date:
    from zoneinfo import ZoneInfo

    return datetime.now(ZoneInfo(zone)).date()


def born_on(day: date) -> str:
    # 1992 was a leap year: any day, Feb 29 included, was someone's date of birth.
    return day.replace(year=1992).isoformat()


def test_a_recipient_created_at_1100_on_their_birthday_is_greeted_within_seconds_once_and_one_created_the_day_after_is_not(
    api_client, delivery_settings, sink, tmp_path
):
    env = process_env(delivery_settings)
    processes = [
        start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
        start_process(["run_worker"], env, tmp_path / "worker.log"),
    ]
    try:
        zone = zone_where_it_is(11)
        today = local_today(zone)
        created = time.monotonic()
        birthday = api_client.post(
            USERS_URL,
            {"first_name": "Ada", "last_name": "Today", "date_of_birth": born_on(today), "timezone": zone},
            format="json",
        )
        day_after = api_client.post(
            USERS_URL,
            {
                "first_name": "Alan",
                "last_name": "Yesterday",
                "date_of_birth": born_on(today - timedelta(days=1)),
                "timezone": zone,
            },
            format="json",
        )
        assert birthday.status_code == day_after.status_code == 201

        assert sink.wait_for(1, timeout=30), "the birthday greeting never arrived"
        arrived_after = time.monotonic() - created
        # Long enough for a second one, were the occurrence ever claimed twice.
        time.sleep(5)
    finally:
        exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    assert arrived_after < 15, f"the greeting took {arrived_after:.1f} s"
    assert len(sink.received) == 1
    greeting = sink.received[0]
    assert greeting.body["message"] == "Hey, Ada Today it's your birthday"
    assert greeting.body["occurrence_date"] == today.isoformat()
    assert greeting.idempotency_key == birthday.json()["next_event"]["idempotency_key"]
    assert Event.objects.get(idempotency_key=greeting.idempotency_key).status == EventStatus.COMPLETED
    unsent = Event.objects.get(user_id=day_after.json()["id"])
    assert (unsent.status, unsent.occurrence_date.year) == (EventStatus.PENDING, today.year + 1)


def test_a_paused_recipients_greeting_is_not_sent_and_is_failed_with_its_reason(
    api_client, delivery_settings, sink, tmp_path
):
    # Both are caught up on their birthday at 11:00: due at once. The one not paused
    # says when the scheduler has been through them both.
    zone = zone_where_it_is(11)
    today = local_today(zone)
    people = {
        name: api_client.post(
            USERS_URL,
            {
                "first_name": name,
                "last_name": "Both",
                "date_of_birth": born_on(today),
                "timezone": zone,
                "paused": name == "Paused",
            },
            format="json",
        ).json()
        for name in ("Paused", "Sent")
    }
    env = process_env(delivery_settings)
    processes = [
        start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
        start_process(["run_worker"], env, tmp_path / "worker.log"),
    ]
    try:
        assert sink.wait_for(1, timeout=30), "the greeting of the recipient not paused never arrived"
        time.sleep(3)
    finally:
        exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    assert [received.body["message"] for received in sink.received] == ["Hey, Sent Both it's your birthday"]
    held_back = Event.objects.get(user_id=people["Paused"]["id"], occurrence_date=today)
    assert (held_back.status, held_back.failure_reason) == (EventStatus.FAILED, "recipient paused")
    assert not Delivery.objects.filter(event=held_back).exists()
    upcoming = Event.objects.get(user_id=people["Paused"]["id"], status=EventStatus.PENDING)
    assert upcoming.occurrence_date.year == today.year + 1


def test_an_erase_while_the_greeting_is_being_sent_cancels_it_and_leaves_no_trace_of_the_recipient(
    api_client, delivery_settings, sink, tmp_path
):
    zone = zone_where_it_is(11)
    today = local_today(zone)
    person = api_client.post(
        USERS_URL,
        {
            "first_name": "Zephyrine",
            "last_name": "Quackenbush",
            "date_of_birth": born_on(today),
            "timezone": zone,
            "external_id": "crm-erase-4242",
        },
        format="json",
    ).json()
    # The receiver names them in its answers (kept with each attempt), and holds the second attempt
    # open long enough for the erase to come while it is being sent.
    sink.script(
        person["next_event"]["idempotency_key"],
        Reply(status=503, body=b'{"error": "busy, Zephyrine"}'),
        Reply(status=200, delay=4, body=b'{"stored": "Zephyrine Quackenbush"}'),
    )
    env = process_env(delivery_settings)
    processes = [
        start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
        start_process(["run_worker"], env, tmp_path / "worker.log"),
    ]
    try:
        wait_until(lambda: len(sink.received) == 2, 30, "the second attempt to reach the receiver")
        assert Delivery.objects.get().status == "SENDING"
        assert DeliveryAttempt.objects.get().response_excerpt == '{"error": "busy, Zephyrine"}'

        assert api_client.delete(f"{USERS_URL}{person['id']}/").status_code == 204

        # The worker is not upset by it: the next recipient's greeting goes out as usual.
        time.sleep(4)
        other = api_client.post(
            USERS_URL,
            {"first_name": "Alan", "last_name": "Next", "date_of_birth": born_on(today), "timezone": zone},
            format="json",
        ).json()
        wait_until(
            lambda: Event.objects.filter(user_id=other["id"], status=EventStatus.COMPLETED).exists(),
            30,
            "the next recipient's greeting to be delivered",
        )
    finally:
        exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    assert (
        traces("Zephyrine", "Quackenbush", "crm-erase-4242", person["id"], person["id"].replace("-", ""))
        == {}
    )
    # The attempt made before the erase stays, naming no one; the one cancelled mid-send was never recorded.
    assert list(
        DeliveryAttempt.objects.filter(delivery__isnull=True).values_list("status_code", "response_excerpt")
    ) == [(503, "")]
    assert "recipient was erased" in (tmp_path / "worker.log").read_text()


def _echoing(person: dict) -> Reply:
    """A 503 whose status line and body echo the greeting, as some gateways and chat services answer."""
    greeting = f"Hey, {person['first_name']} {person['last_name']} it's your birthday"
    return Reply(
        status=503, reason=f"Unavailable for {greeting}", body=f'{{"rejected": "{greeting}"}}'.encode()
    )


def test_erased_recipients_whose_receiver_echoed_their_names_leave_them_in_no_column_and_no_log_line(
    api_client, delivery_settings, sink, tmp_path, caplog
):
    caplog.set_level("INFO")
    # Long enough to hold a request open across an erase; a receiver failing 3 times in a row is FAILING.
    delivery_settings.WEBHOOK_TIMEOUT = timedelta(seconds=10)
    env = process_env(
        delivery_settings,
        ENDPOINT_FAILURE_THRESHOLD=3,
        ENDPOINT_PROBE_FIRST_INTERVAL="0.5s",
        ENDPOINT_PROBE_MAX_INTERVAL="1s",
    )
    zone = zone_where_it_is(11)
    today = local_today(zone)

    def create(first_name: str, last_name: str, external_id: str) -> dict:
        response = api_client.post(
            USERS_URL,
            {
                "first_name": first_name,
                "last_name": last_name,
                "date_of_birth": born_on(today),
                "timezone": zone,
                "external_id": external_id,
            },
            format="json",
        )
        assert response.status_code == 201
        return response.json()

    def completed(person: dict) -> bool:
        return Event.objects.filter(user_id=person["id"], status=EventStatus.COMPLETED).exists()

    processes = [
        start_process(["run_scheduler"], env, tmp_path / "scheduler.log"),
        start_process(["run_worker"], env, tmp_path / "worker.log"),
    ]
    try:
        # At rest: three echoing refusals make the endpoint FAILING, its probe is accepted, then the erase.
        at_rest = create("Zyxwquorra", "Failvane", "echo-at-rest-1")
        sink.script(at_rest["next_event"]["idempotency_key"], *[_echoing(at_rest)] * 3, Reply(status=200))
        wait_until(lambda: completed(at_rest), 60, "the first greeting to be delivered after three refusals")
        assert Endpoint.objects.get().last_error == "HTTP 503 (Service Unavailable)"
        # The search can find them: their receiver's words are on the attempt rows until the erase.
        assert ("delivery_deliveryattempt", "error") in traces("Failvane")
        assert api_client.delete(f"{USERS_URL}{at_rest['id']}/").status_code == 204

        # Mid-request: the receiver holds the second request open while the erase commits, then refuses it
        # in words that name them; the worker records that answer after the erase.
        mid_request = create("Quillonette", "Midrequestova", "echo-mid-request-2")
        held = _echoing(mid_request)
        held.delay = 3
        sink.script(mid_request["next_event"]["idempotency_key"], _echoing(mid_request), held)
        key = mid_request["next_event"]["idempotency_key"]
        wait_until(lambda: sink.keys().count(key) == 2, 30, "the second request to be held open")
        assert api_client.delete(f"{USERS_URL}{mid_request['id']}/").status_code == 204
        wait_until(
            lambda: "Lease lost" in (tmp_path / "worker.log").read_text(),
            30,
            "the late answer to be recorded",
        )

        # The worker goes on as usual.
        after = create("Alan", "Next", "echo-after-3")
        wait_until(lambda: completed(after), 30, "the next recipient's greeting to be delivered")
    finally:
        exit_codes = stop_all(processes)

    assert exit_codes == [0, 0]
    needles = []
    for person in (at_rest, mid_request):
        needles += [person["first_name"], person["last_name"], person["external_id"]]
        assert traces(*needles, person["id"], person["id"].replace("-", "")) == {}
    logged = {
        "scheduler": (tmp_path / "scheduler.log").read_text().splitlines(),
        "worker": (tmp_path / "worker.log").read_text().splitlines(),
        "web (this process)": [repr(vars(record)) for record in caplog.records],
    }
    assert any("Endpoint failing" in line for line in logged["worker"])
    assert {
        process: [line for line in lines if any(needle in line for needle in needles)]
        for process, lines in logged.items()
    } == {process: [] for process in logged}
