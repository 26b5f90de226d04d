"""import_users as a real process, SIGKILLed part-way and run again: each row ends up once."""

import signal

import pytest
from django.db import connection
from django.db.models import Count

from delivery.tests.pipeline import process_env, start_process, wait_until
from scheduling.models import Event, EventStatus, EventType
from users.models import User

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROWS = 60_000
BATCH = "500"
ZONES = ("America/New_York", "Europe/London", "Asia/Kathmandu", "Pacific/Chatham")


def write_people(path) -> None:
    """Every third row has a wedding date, and so an anniversary beside the birthday."""
    with open(path, "w", encoding="utf-8") as out:
        out.write("external_id,first_name,last_name,date_of_birth,timezone,anniversary_date\n")
        for i in range(ROWS):
            wedding = f"{2000 + i % 20}-{1 + i % 12:02d}-{1 + i % 28:02d}" if i % 3 == 0 else ""
            out.write(
                f"crm-{i},First{i},Last,{1950 + i % 50}-{1 + i % 12:02d}-{1 + i % 28:02d},{ZONES[i % 4]},{wedding}\n"
            )


def other_sessions() -> int:
    """Connections to this database besides the test's own (the importer's, while they last)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_an_import_killed_after_its_first_batches_and_run_again_holds_each_row_once(settings, tmp_path):
    # given a file of 60,000 rows with external ids, imported in batches of 500
    people = tmp_path / "people.csv"
    write_people(people)
    env = process_env(settings)
    command = ["import_users", str(people), "--batch-size", BATCH]

    # when the import is SIGKILLed once its first batches have committed
    first = start_process(command, env, tmp_path / "first.log")
    try:
        wait_until(lambda: User.objects.count() >= 1000, 120, "the first batches to commit")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    # Once the server has dropped the killed process's connections, each of its
    # batches is either committed or rolled back.
    wait_until(lambda: other_sessions() == 0, 30, "the killed import's connections to close")
    written = User.objects.count()

    # then it was killed part-way, every committed recipient with its event
    assert first.returncode == -signal.SIGKILL
    assert 0 < written < ROWS, written
    assert Event.objects.filter(status=EventStatus.PENDING, event_type=EventType.BIRTHDAY).count() == written

    # and when the same file is imported again
    second = start_process(command, env, tmp_path / "second.log")
    assert second.wait(timeout=240) == 0, (tmp_path / "second.log").read_text()

    # then every row is exactly one recipient, each with exactly one PENDING event
    # per type it has (a birthday; an anniversary for every third), and the rows
    # the first run wrote were found, not written again
    log = (tmp_path / "second.log").read_text()
    assert f"{ROWS - written} created, 0 updated, {written} unchanged" in log, log
    assert User.objects.count() == ROWS
    assert User.objects.values("external_id").distinct().count() == ROWS
    assert set(User.objects.values_list("external_id", flat=True)) == {f"crm-{i}" for i in range(ROWS)}
    pending = (
        Event.objects.filter(status=EventStatus.PENDING)
        .values("user_id", "event_type")
        .annotate(count=Count("id"))
    )
    assert len(pending) == ROWS + ROWS // 3
    assert {row["count"] for row in pending} == {1}
    assert (
        Event.objects.filter(event_type=EventType.ANNIVERSARY).count()
        == User.objects.filter(anniversary_date__isnull=False).count()
        == ROWS // 3
    )
    assert not Event.objects.exclude(status=EventStatus.PENDING).exists()
