"""The import_users command: all-or-nothing CSV import with per-line error reports."""

import io
from datetime import UTC, date, datetime

import pytest
from django.core.management import CommandError, call_command
from freezegun import freeze_time

from scheduling.models import Event, EventStatus
from scheduling.services.occurrences import idempotency_key_for
from users import services
from users.models import User
from users.services import user_create, user_update

UTC = UTC
HEADER = "first_name,last_name,date_of_birth,timezone\n"
HEADER_WITH_IDS = "external_id,first_name,last_name,date_of_birth,timezone\n"

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


@pytest.mark.parametrize(
    "header", ["first_name,last_name,date_of_birth\n", "first_name,surname,date_of_birth,timezone\n"]
)
def test_missing_column_is_refused(tmp_path, header):
    path = write_csv(tmp_path, header + "Ada,Lovelace,1990-05-05,UTC\n")

    message, _ = run_failing_import(path)

    assert "missing" in message
    assert ("timezone" if "surname" not in header else "last_name") in message.split("missing:")[1]
    assert User.objects.count() == 0


@pytest.mark.parametrize("skip_invalid", [(), ("--skip-invalid",)])
def test_a_header_with_unknown_columns_is_refused_naming_them_and_nothing_is_imported(tmp_path, skip_invalid):
    # Given a file whose header misspells send_time and paused: their values would be lost without a word
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,send_tme,pasued\nAda,Lovelace,1990-05-05,UTC,07:30,true\n",
    )

    # When it is imported, even skipping bad rows
    message, _ = run_failing_import(path, *skip_invalid)

    # Then it is refused at line 1, naming each unknown column, and nobody is imported
    assert message.startswith("line 1: unknown column(s) 'send_tme' (column 5), 'pasued' (column 6)")
    assert "nothing was imported" in message
    assert User.objects.count() == 0


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    path = write_csv(
        tmp_path, "first_name,last_name,date_of_birth,timezone,timezone\nAda,Lovelace,1990-05-05,UTC,UTC\n"
    )

    message, _ = run_failing_import(path)

    assert message.startswith("line 1: named twice: timezone")
    assert User.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_a_row_with_more_cells_than_the_header_is_reported_by_line_naming_them_and_nothing_is_imported(
    tmp_path,
):
    # Given a file whose third line has two cells the header does not name (a comma in a name, unquoted)
    path = write_csv(
        tmp_path,
        HEADER + "Ada,Lovelace,1990-05-05,UTC\nGrace,Hopper,1906-12-09,America/New_York,Jr.,extra\n",
    )

    # When it is imported
    message, stderr = run_failing_import(path)

    # Then that line is reported, naming the cells, and nothing is imported
    assert stderr.splitlines() == [
        "line 3: 2 cell(s) beyond the header's 4 columns: cell 5 'Jr.', cell 6 'extra'"
    ]
    assert "1 bad row(s) out of 2" in message
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


# --- external_id: imports that can run again ------------------------------------------------


CRM_ROWS = (
    HEADER_WITH_IDS
    + "crm-1,Ada,Lovelace,1990-05-05,Europe/London\n"
    + "crm-2,Alan,Turing,1980-06-23,Europe/London\n"
    + "crm-3,Grace,Hopper,1906-12-09,America/New_York\n"
    + "crm-4,Edsger,Dijkstra,1930-05-11,Europe/Amsterdam\n"
)


def users_and_events() -> dict:
    return {
        user["external_id"]: (
            user,
            list(Event.objects.filter(user_id=user["id"]).values().order_by("occurrence_date")),
        )
        for user in User.objects.values()
    }


@freeze_time("2026-11-22T12:00:00Z")
def test_an_import_run_again_finds_its_rows_by_external_id_and_changes_nothing(tmp_path):
    # given a file of rows with external ids, imported once
    path = write_csv(tmp_path, CRM_ROWS)
    first, _ = run_import(path)
    before = users_and_events()

    # when the same file is imported again
    second, _ = run_import(path)

    # then nobody was created twice and no row changed
    assert "Imported 4 user(s)" in first and "4 created, 0 updated, 0 unchanged" in first
    assert "Imported 4 user(s)" in second and "0 created, 0 updated, 4 unchanged" in second
    assert users_and_events() == before
    assert Event.objects.filter(status=EventStatus.PENDING).count() == 4


@freeze_time("2026-11-22T12:00:00Z")
def test_rows_without_an_external_id_are_created_each_time_as_before(tmp_path):
    path = write_csv(
        tmp_path, HEADER_WITH_IDS + "crm-1,Ada,Lovelace,1990-05-05,UTC\n , Alan,Turing,1980-06-23,UTC\n"
    )

    run_import(path)
    stdout, _ = run_import(path)

    assert "1 created, 0 updated, 1 unchanged" in stdout
    assert User.objects.filter(external_id="crm-1").count() == 1
    assert User.objects.filter(last_name="Turing", external_id__isnull=True).count() == 2


def test_a_changed_row_updates_its_recipient_and_reschedules_exactly_as_an_api_edit(tmp_path):
    # given four recipients imported with external ids, and a twin of each made
    # through the service the API calls
    with freeze_time("2026-11-22T12:00:00Z"):
        run_import(write_csv(tmp_path, CRM_ROWS, "first.csv"))
        twins = {
            crm: user_create(
                first_name=first, last_name=last, date_of_birth=date.fromisoformat(born), timezone=zone
            )
            for crm, first, last, born, zone in (line.split(",") for line in CRM_ROWS.splitlines()[1:])
        }
    before = users_and_events()

    # when a file moves crm-1 to Tokyo, corrects crm-2's date of birth and renames
    # crm-3, leaving crm-4 as it was; and an API edit makes the same changes to the twins
    changed = (
        HEADER_WITH_IDS
        + "crm-1,Ada,Lovelace,1990-05-05,Asia/Tokyo\n"
        + "crm-2,Alan,Turing,1980-08-10,Europe/London\n"
        + "crm-3,Grace,Murray Hopper,1906-12-09,America/New_York\n"
        + "crm-4,Edsger,Dijkstra,1930-05-11,Europe/Amsterdam\n"
    )
    with freeze_time("2027-01-10T12:00:00Z"):
        stdout, _ = run_import(write_csv(tmp_path, changed, "second.csv"))
        for crm, patch in (
            ("crm-1", {"timezone": "Asia/Tokyo"}),
            ("crm-2", {"date_of_birth": date(1980, 8, 10)}),
            ("crm-3", {"last_name": "Murray Hopper"}),
        ):
            user_update(user=twins[crm], data=patch)

    # then three recipients were updated and one left alone
    assert "0 created, 3 updated, 1 unchanged" in stdout
    after = users_and_events()
    assert after["crm-4"] == before["crm-4"]
    assert [after[crm][0]["version"] for crm in ("crm-1", "crm-2", "crm-3", "crm-4")] == [2, 2, 2, 1]
    assert after["crm-3"][1] == before["crm-3"][1]  # a rename touches no event
    # the move keeps the occurrence and its key and moves the instant
    (moved,) = after["crm-1"][1]
    assert (moved["id"], moved["idempotency_key"]) == (
        before["crm-1"][1][0]["id"],
        before["crm-1"][1][0]["idempotency_key"],
    )
    assert moved["target_timestamp_local"] == "2027-05-05T09:00:00+09:00"
    # the new date of birth replaces the pending event
    (replaced,) = after["crm-2"][1]
    assert replaced["id"] != before["crm-2"][1][0]["id"]
    assert replaced["occurrence_date"] == date(2027, 8, 10)
    # and each imported recipient's events are scheduled exactly as its API-edited twin's
    schedule = [
        "event_type",
        "status",
        "occurrence_date",
        "target_timestamp_utc",
        "target_timestamp_local",
        "target_timezone",
        "version",
    ]
    for crm, twin in twins.items():
        assert list(Event.objects.filter(user=twin).values(*schedule)) == [
            {field: event[field] for field in schedule} for event in after[crm][1]
        ]


@freeze_time("2026-11-22T12:00:00Z")
def test_an_external_id_twice_in_a_file_is_reported_by_line_and_nothing_is_imported(tmp_path):
    path = write_csv(
        tmp_path,
        HEADER_WITH_IDS
        + "crm-1,Ada,Lovelace,1990-05-05,UTC\n"
        + "crm-2,Alan,Turing,1980-06-23,UTC\n"
        + " crm-1 ,Grace,Hopper,1906-12-09,UTC\n"
        + "crm-1,,Dijkstra,1930-05-11,UTC\n",
    )

    message, stderr = run_failing_import(path)

    assert stderr.splitlines() == [
        "line 4: external_id: 'crm-1' is also on line 2; each id may appear once.",
        "line 5: first_name: First name must not be blank.; external_id: 'crm-1' is also on line 2; each id may appear once.",
    ]
    assert "2 bad row(s) out of 4" in message
    assert User.objects.count() == 0


def another_writer_creates_crm_1_after_the_import_looked_it_up(monkeypatch):
    user_create(
        first_name="Other",
        last_name="Writer",
        date_of_birth=date(1970, 1, 1),
        timezone="UTC",
        external_id="crm-1",
    )
    monkeypatch.setattr(services, "users_by_external_id", lambda **_: {})


@freeze_time("2026-11-22T12:00:00Z")
def test_an_external_id_created_meanwhile_by_another_writer_stops_the_batch_without_a_duplicate(
    tmp_path, monkeypatch
):
    path = write_csv(tmp_path, CRM_ROWS)
    another_writer_creates_crm_1_after_the_import_looked_it_up(monkeypatch)

    message, _ = run_failing_import(path)

    assert "created by another writer" in message and "Run the import again" in message
    assert list(User.objects.values_list("first_name", flat=True)) == ["Other"]
    assert Event.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_pipelined_writer_stops_at_an_external_id_created_meanwhile_too(tmp_path, monkeypatch):
    # batches of one: the first (crm-1) fails on the writer thread, after the next was computed
    path = write_csv(tmp_path, CRM_ROWS)
    another_writer_creates_crm_1_after_the_import_looked_it_up(monkeypatch)

    message, _ = run_failing_import(path, "--batch-size", "1")

    assert "created by another writer" in message
    assert User.objects.filter(external_id="crm-1").count() == 1
    assert User.objects.filter(external_id="crm-4").count() == 0


# --- anniversary_date: an optional column --------------------------------------------------


def anniversaries(user) -> list[tuple]:
    return list(
        Event.objects.filter(user=user, event_type="ANNIVERSARY").values_list(
            "status", "occurrence_date", "target_timestamp_local"
        )
    )


@freeze_time("2026-11-22T12:00:00Z")
def test_the_anniversary_date_column_schedules_an_anniversary_for_the_rows_with_a_date(tmp_path):
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,anniversary_date\n"
        + "Ada,Lovelace,1990-05-05,Europe/London, 2004-02-29 \n"
        + "Alan,Turing,1980-06-23,Europe/London,\n",
    )

    stdout, _ = run_import(path)

    assert "2 created" in stdout
    ada, alan = User.objects.get(last_name="Lovelace"), User.objects.get(last_name="Turing")
    assert (ada.anniversary_date, alan.anniversary_date) == (date(2004, 2, 29), None)
    assert anniversaries(ada) == [(EventStatus.PENDING, date(2027, 2, 28), "2027-02-28T09:00:00+00:00")]
    assert list(Event.objects.filter(user=alan).values_list("event_type", flat=True)) == ["BIRTHDAY"]


@freeze_time("2026-11-22T12:00:00Z")
def test_a_bad_anniversary_date_is_reported_by_line_and_nothing_is_imported(tmp_path):
    path = write_csv(
        tmp_path,
        "first_name,last_name,date_of_birth,timezone,anniversary_date\n"
        + "Ada,Lovelace,1990-05-05,UTC,2015-06-20\n"
        + "Alan,Turing,1980-06-23,UTC,2023-02-29\n"
        + "Grace,Hopper,1906-12-09,UTC,1899-12-31\n"
        + "Edsger,Dijkstra,1930-05-11,America/New_York,2026-11-23\n",
    )

    _, stderr = run_failing_import(path)

    lines = stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["line 3", "line 4", "line 5"]
    assert all("anniversary_date" in line for line in lines)
    assert "before 1900-01-01" in lines[1] and "in the future" in lines[2]
    assert User.objects.count() == 0


def test_a_rerun_sets_and_clears_wedding_dates_and_a_file_without_the_column_leaves_them(tmp_path):
    header = "external_id,first_name,last_name,date_of_birth,timezone,anniversary_date\n"
    with freeze_time("2026-11-22T12:00:00Z"):
        run_import(
            write_csv(
                tmp_path,
                header + "crm-1,Ada,Lovelace,1990-05-05,UTC,2015-06-20\ncrm-2,Alan,Turing,1980-06-23,UTC,\n",
                "a.csv",
            )
        )
    ada, alan = User.objects.get(external_id="crm-1"), User.objects.get(external_id="crm-2")
    assert len(anniversaries(ada)) == 1 and anniversaries(alan) == []

    with freeze_time("2027-01-10T12:00:00Z"):
        swapped, _ = run_import(
            write_csv(
                tmp_path,
                header + "crm-1,Ada,Lovelace,1990-05-05,UTC,\ncrm-2,Alan,Turing,1980-06-23,UTC,2016-09-03\n",
                "b.csv",
            )
        )
        without_column, _ = run_import(
            write_csv(
                tmp_path,
                HEADER_WITH_IDS + "crm-1,Ada,Lovelace,1990-05-05,UTC\ncrm-2,Alan,Turing,1980-06-23,UTC\n",
                "c.csv",
            )
        )

    assert "0 created, 2 updated, 0 unchanged" in swapped
    assert "0 created, 0 updated, 2 unchanged" in without_column
    assert anniversaries(ada) == []
    assert anniversaries(alan) == [(EventStatus.PENDING, date(2027, 9, 3), "2027-09-03T09:00:00+00:00")]
    alan.refresh_from_db()
    assert alan.anniversary_date == date(2016, 9, 3)


# --- the paused column ------------------------------------------------------------------------

PAUSED_HEADER = "external_id,first_name,last_name,date_of_birth,timezone,paused\n"


def import_with_every_paused_spelling(tmp_path) -> None:
    cells = ["true", "TRUE", "1", "yes", " Yes ", "false", "0", "no", "No", ""]
    rows = "".join(
        f"crm-{i},Ada{i},Lovelace,1990-05-05,Europe/London,{cell}\n" for i, cell in enumerate(cells)
    )

    stdout, stderr = run_import(
        write_csv(tmp_path, PAUSED_HEADER + rows), "--by", "ops-bob", "--batch-size", "3"
    )

    assert stderr == "" and f"{len(cells)} created" in stdout
    users = {user.external_id: user for user in User.objects.all()}
    assert [users[f"crm-{i}"].paused for i in range(len(cells))] == [True] * 5 + [False] * 5
    paused = users["crm-0"]
    assert (paused.paused_at, paused.paused_by, paused.resumed_at, paused.resumed_by) == (
        datetime(2026, 11, 22, 12, 0, tzinfo=UTC),
        "ops-bob",
        None,
        "",
    )
    assert {(u.paused_at, u.paused_by) for u in users.values() if not u.paused} == {(None, "")}
    # Paused or not, each has their next occurrence: the claim holds it back, as for a pause from the API.
    assert Event.objects.filter(status=EventStatus.PENDING).count() == len(cells)


@freeze_time("2026-11-22T12:00:00Z")
def test_the_paused_column_creates_recipients_paused_by_the_importer_with_every_spelling(tmp_path):
    import_with_every_paused_spelling(tmp_path)


@freeze_time("2026-11-22T12:00:00Z")
@pytest.mark.django_db(transaction=True)
def test_the_pipelined_writer_creates_the_paused_recipients_too(tmp_path):
    import_with_every_paused_spelling(tmp_path)


@freeze_time("2026-11-22T12:00:00Z")
def test_without_by_the_import_records_the_account_running_it(tmp_path, monkeypatch):
    monkeypatch.setattr("getpass.getuser", lambda: "carol")

    run_import(write_csv(tmp_path, PAUSED_HEADER + "crm-1,Ada,Lovelace,1990-05-05,UTC,true\n"))

    assert User.objects.get().paused_by == "import_users (carol)"


@pytest.mark.parametrize("by", ["", "   ", "x" * 151])
def test_a_by_that_names_nobody_or_is_too_long_is_refused_before_anything_is_read(tmp_path, by):
    message, _ = run_failing_import(
        write_csv(tmp_path, PAUSED_HEADER + "crm-1,Ada,Lovelace,1990-05-05,UTC,true\n"), "--by", by
    )

    assert "--by" in message
    assert User.objects.count() == 0


@freeze_time("2026-11-22T12:00:00Z")
def test_a_paused_cell_that_is_not_a_flag_is_reported_by_line_naming_the_column_and_nothing_is_imported(
    tmp_path,
):
    rows = (
        "crm-1,Ada,Lovelace,1990-05-05,UTC,true\n"  # line 2: good
        + "crm-2,Alan,Turing,1980-06-23,UTC,maybe\n"  # line 3: not a flag
        + "crm-3,Grace,Hopper,1906-12-09,UTC,2\n"  # line 4: not 1 or 0
        + "crm-4,,Dijkstra,1930-05-11,Mars/Olympus,paused\n"  # line 5: three bad fields, one line
    )

    message, stderr = run_failing_import(write_csv(tmp_path, PAUSED_HEADER + rows))

    lines = stderr.splitlines()
    assert [line.split(":")[0] for line in lines] == ["line 3", "line 4", "line 5"]
    assert (
        lines[0] == "line 3: paused: Must be true or false (or 1/0, yes/no; empty: not paused), not 'maybe'."
    )
    assert "paused:" in lines[1] and "'2'" in lines[1]
    assert all(f"{field}:" in lines[2] for field in ("first_name", "timezone", "paused"))
    assert "3 bad row(s) out of 4" in message
    assert User.objects.count() == 0 and Event.objects.count() == 0


def test_a_rerun_pauses_and_resumes_as_the_api_does_and_a_file_without_the_column_leaves_the_pauses(tmp_path):
    with freeze_time("2026-11-22T12:00:00Z"):
        run_import(write_csv(tmp_path, CRM_ROWS, "first.csv"))
        user_update(user=User.objects.get(external_id="crm-3"), data={"paused": True}, by="ops-alice")
    versions = dict(User.objects.values_list("external_id", "version"))

    # crm-1 paused, crm-2 stays unpaused, crm-3 (paused through the API) resumed by an empty cell, crm-4 as it was
    rows = (
        PAUSED_HEADER
        + "crm-1,Ada,Lovelace,1990-05-05,Europe/London,yes\n"
        + "crm-2,Alan,Turing,1980-06-23,Europe/London,false\n"
        + "crm-3,Grace,Hopper,1906-12-09,America/New_York,\n"
        + "crm-4,Edsger,Dijkstra,1930-05-11,Europe/Amsterdam,no\n"
    )
    with freeze_time("2026-12-01T08:00:00Z"):
        stdout, _ = run_import(write_csv(tmp_path, rows, "second.csv"), "--by", "ops-bob")
        again, _ = run_import(write_csv(tmp_path, rows, "second.csv"), "--by", "ops-carol")
        without_column, _ = run_import(write_csv(tmp_path, CRM_ROWS, "third.csv"), "--by", "ops-dan")

    assert "0 created, 2 updated, 2 unchanged" in stdout
    assert (
        "0 created, 0 updated, 4 unchanged" in again and "0 created, 0 updated, 4 unchanged" in without_column
    )
    users = {user.external_id: user for user in User.objects.all()}
    moment = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert (users["crm-1"].paused, users["crm-1"].paused_at, users["crm-1"].paused_by) == (
        True,
        moment,
        "ops-bob",
    )
    assert (
        users["crm-3"].paused,
        users["crm-3"].paused_by,
        users["crm-3"].resumed_at,
        users["crm-3"].resumed_by,
    ) == (
        False,
        "ops-alice",
        moment,
        "ops-bob",
    )
    assert not users["crm-2"].paused and not users["crm-4"].paused
    assert {crm: users[crm].version - versions[crm] for crm in users} == {
        "crm-1": 1,
        "crm-2": 0,
        "crm-3": 1,
        "crm-4": 0,
    }


@pytest.mark.usefixtures("default_destination")
def test_a_recipient_imported_paused_is_not_greeted_but_failed_with_its_reason(tmp_path):
    from delivery.dispatch.claim import deliveries_enqueue_due
    from delivery.models import Delivery
    from scheduling.pauses import RECIPIENT_PAUSED

    with freeze_time("2027-04-01T00:00:00Z"):
        run_import(
            write_csv(
                tmp_path,
                PAUSED_HEADER
                + "crm-1,Ada,Lovelace,1990-05-05,Europe/London,yes\n"
                + "crm-2,Bea,Lovelace,1990-05-05,Europe/London,no\n",
            ),
            "--by",
            "ops-bob",
        )
    nine_local = datetime(2027, 5, 5, 8, 0, 1, tzinfo=UTC)
    with freeze_time(nine_local):
        deliveries_enqueue_due(now=nine_local)

    held = Event.objects.get(user__external_id="crm-1", occurrence_date=date(2027, 5, 5))
    sent = Event.objects.get(user__external_id="crm-2", occurrence_date=date(2027, 5, 5))
    assert (held.status, held.failure_reason) == (EventStatus.FAILED, RECIPIENT_PAUSED)
    assert sent.status == EventStatus.PROCESSING
    assert list(Delivery.objects.values_list("event_id", flat=True)) == [sent.id]
