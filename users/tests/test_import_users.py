"""The import_users command: all-or-nothing CSV import with per-line error reports."""

import io
from datetime import UTC, date, datetime

import pytest
from django.core.management import CommandError, call_command
from freezegun import freeze_time

from scheduling.models import Event, EventStatus
from scheduling.services.occurrences import idempotency_key_for
from users.models import User

UTC = UTC
HEADER = "first_name,last_name,date_of_birth,timezone\n"

pytestmark = pytest.mark.django_db


def write_csv(tmp_path, text: str, name: str = "users.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def run_import(path, *args):
    stdout, stderr = io.StringIO(), io.StringIO()
    call_command("import_users", str(path), *args, stdout=stdout, stderr=stderr)
    return stdout.getvalue(), stderr.getvalue()


def run_failing_import(path, *args):
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as excinfo:
        call_command("import_users", str(path), *args, stdout=stdout, stderr=stderr)
    return str(excinfo.value), stderr.getvalue()


MIXED_ROWS = (
    HEADER
    + "Ada,Lovelace,1990-05-05,Europe/London\n"  # line 2: good
    + "   ,Blank,1990-01-01,UTC\n"  # line 3: blank first name
    + "Alan,Turing,1980-06-23,Mars/Olympus\n"  # line 4: unknown zone
    + "Grace,Hopper,2023-02-29,America/New_York\n"  # line 5: no such date
    + "Katherine,Johnson,2027-01-01,Asia/Tokyo\n"  # line 6: future
    + "Edsger,Dijkstra,1930-05-11,+05:00\n"  # line 7: offset, not a zone
    + "Barbara,Liskov,1939-11-07,America/Los_Angeles\n"  # line 8: good
)


@freeze_time("2026-11-22T12:00:00Z")
def test_valid_file_creates_users_each_with_one_pending_event(tmp_path):
    # given a CSV of three valid rows (names padded, a Feb 29 birthday)
    path = write_csv(
        tmp_path,
        HEADER
        + " Ada , Lovelace ,1990-05-05,Europe/London\n"
        + "Alan,Turing,1980-06-23,Asia/Tokyo\n"
        + "Leap,Day,2000-02-29,America/New_York\n",
    )

    # when it is imported
    stdout, stderr = run_import(path)

    # then every row became a trimmed user with exactly one PENDING event
    assert "Imported 3 user(s)" in stdout
    assert stderr == ""
    assert User.objects.count() == 3
    assert Event.objects.count() == 3
    ada = User.objects.get(last_name="Lovelace")
    assert (ada.first_name, ada.date_of_birth, ada.timezone) == ("Ada", date(1990, 5, 5), "Europe/London")
    for user in User.objects.all():
        assert Event.objects.filter(user=user, status=EventStatus.PENDING).count() == 1
    ada_event = Event.objects.get(user=ada)
    assert ada_event.occurrence_date == date(2027, 5, 5)
    assert ada_event.target_timestamp_utc == datetime(2027, 5, 5, 8, 0, tzinfo=UTC)
    assert ada_event.idempotency_key == idempotency_key_for(
        user_id=ada.id, event_type=ada_event.event_type, occurrence_date=date(2027, 5, 5)
    )
    leap_event = Event.objects.get(user__last_name="Day")
    assert leap_event.occurrence_date == date(2027, 2, 28)


@freeze_time("2026-11-22T12:00:00Z")
def test_file_imported_in_several_batches_creates_everyone(tmp_path):
    rows = "".join(f"User{i},Batch,1990-01-{i % 28 + 1:02d},UTC\n" for i in range(7))
    path = write_csv(tmp_path, HEADER + rows)

    run_import(path, "--batch-size", "3")

    assert User.objects.count() == 7
    assert Event.objects.filter(status=EventStatus.PENDING).count() == 7


@freeze_time("2026-11-22T12:00:00Z")
def test_file_with_bad_rows_reports_each_by_line_and_imports_nothing(tmp_path):
    # given a CSV with good rows and five bad ones
    path = write_csv(tmp_path, MIXED_ROWS)

    # when it is imported
    message, stderr = run_failing_import(path)

    # then each bad row is reported with its line number and the field at fault
    lines = stderr.splitlines()
    assert len(lines) == 5, stderr
    assert lines[0].startswith("line 3:") and "first_name" in lines[0]
    assert lines[1].startswith("line 4:") and "timezone" in lines[1] and "Mars/Olympus" in lines[1]
    assert lines[2].startswith("line 5:") and "date_of_birth" in lines[2]
    assert lines[3].startswith("line 6:") and "date_of_birth" in lines[3] and "future" in lines[3]
    assert lines[4].startswith("line 7:") and "timezone" in lines[4] and "offset" in lines[4]
    assert not any(line.startswith(("line 2:", "line 8:")) for line in lines)
    # and the command fails without storing the good rows either
    assert "5 bad row(s) out of 7" in message
    assert "nothing was imported" in message
    assert User.objects.count() == 0
    assert Event.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_one_row_with_several_bad_fields_is_reported_once_naming_all(tmp_path):
    path = write_csv(tmp_path, HEADER + "Ada,Lovelace,1990-05-05,UTC\n,,1850-01-01,Nowhere\n")

    _, stderr = run_failing_import(path)

    assert stderr.count("line 3:") == 1
    for field in ("first_name", "last_name", "date_of_birth", "timezone"):
        assert field in stderr
    assert User.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_skip_invalid_imports_only_the_good_rows(tmp_path):
    # given the same mixed file
    path = write_csv(tmp_path, MIXED_ROWS)

    # when imported with --skip-invalid
    stdout, stderr = run_import(path, "--skip-invalid")

    # then the two good rows are imported, the bad ones still listed
    assert sorted(User.objects.values_list("last_name", flat=True)) == ["Liskov", "Lovelace"]
    assert Event.objects.filter(status=EventStatus.PENDING).count() == 2
    assert Event.objects.count() == 2
    assert "Imported 2 user(s)" in stdout
    assert "skipped 5 bad row(s)" in stdout
    assert [line.split(":")[0] for line in stderr.splitlines()] == [
        "line 3",
        "line 4",
        "line 5",
        "line 6",
        "line 7",
    ]


@pytest.mark.parametrize("header", ["first_name,last_name,date_of_birth\n", "first_name,surname,date_of_birth,timezone\n"])
def test_missing_column_is_refused(tmp_path, header):
    path = write_csv(tmp_path, header + "Ada,Lovelace,1990-05-05,UTC\n")

    message, _ = run_failing_import(path)

    assert "missing" in message
    assert ("timezone" if "surname" not in header else "last_name") in message.split("missing:")[1]
    assert User.objects.count() == 0


def test_empty_file_is_refused_as_having_no_header(tmp_path):
    path = write_csv(tmp_path, "")

    message, _ = run_failing_import(path)

    assert "missing" in message
    assert User.objects.count() == 0


def test_unreadable_path_is_a_command_error(tmp_path):
    message, _ = run_failing_import(tmp_path / "does-not-exist.csv")

    assert "Cannot read" in message


@freeze_time("2026-11-22T12:00:00Z")
def test_dry_run_validates_but_imports_nothing(tmp_path):
    # given a valid file
    path = write_csv(
        tmp_path, HEADER + "Ada,Lovelace,1990-05-05,Europe/London\nAlan,Turing,1980-06-23,Asia/Tokyo\n"
    )

    # when it is dry-run
    stdout, _ = run_import(path, "--dry-run")

    # then it reports what it would import and stores nothing
    assert "2 valid row(s), 0 bad" in stdout
    assert "dry run" in stdout
    assert User.objects.count() == 0
    assert Event.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_dry_run_with_bad_rows_still_reports_them_and_fails(tmp_path):
    path = write_csv(tmp_path, MIXED_ROWS)

    message, stderr = run_failing_import(path, "--dry-run")

    assert "line 3:" in stderr and "line 7:" in stderr
    assert "5 bad row(s)" in message
    assert User.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_dry_run_with_skip_invalid_imports_nothing(tmp_path):
    path = write_csv(tmp_path, MIXED_ROWS)

    stdout, _ = run_import(path, "--dry-run", "--skip-invalid")

    assert "2 valid row(s), 5 bad" in stdout
    assert User.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_file_with_a_byte_order_mark_is_read(tmp_path):
    # spreadsheets often save UTF-8 CSVs with a BOM before the header
    path = tmp_path / "bom.csv"
    path.write_text(HEADER + "Zoë,Ågren,1990-05-05,Europe/Stockholm\n", encoding="utf-8-sig")

    run_import(path)

    assert User.objects.get().first_name == "Zoë"


@freeze_time("2026-11-22T12:00:00Z")
def test_birth_date_already_today_in_kiritimati_is_accepted_in_the_import(tmp_path):
    # at 2026-11-22 12:00 UTC it is already the 23rd in Kiritimati, not in New York
    path = write_csv(
        tmp_path,
        HEADER + "Early,Zone,2026-11-23,Pacific/Kiritimati\nLate,Zone,2026-11-23,America/New_York\n",
    )

    _, stderr = run_import(path, "--skip-invalid")

    assert list(User.objects.values_list("first_name", flat=True)) == ["Early"]
    assert stderr.startswith("line 3:")


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_batches_are_written_by_the_pipelined_writer(tmp_path):
    # Outside any transaction the importer writes batch N on a second connection
    # while it computes batch N+1; every user still lands with exactly one event.
    lines = "\n".join(f"First{i},Last{i},1985-0{1 + i % 9}-1{i % 9},Asia/Kathmandu" for i in range(23))
    path = write_csv(tmp_path, "first_name,last_name,date_of_birth,timezone\n" + lines + "\n")

    run_import(path, "--batch-size", "5")

    assert User.objects.count() == 23
    assert Event.objects.filter(status=EventStatus.PENDING).count() == 23
    assert Event.objects.values("user").distinct().count() == 23
