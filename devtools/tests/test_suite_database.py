"""make test's database: the server at the URL when one answers, else an embedded one started on its port."""

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from django.db import connection

from devtools.ports import free_port
from devtools.postgres import port_is_open
from devtools.suite_database import database_url, run_with_database

# Prints the server's data directory, reached through DATABASE_URL as a test process would.
SHOW_DATA_DIRECTORY = """
import os, environ, psycopg
c = environ.Env.db_url_config(os.environ["DATABASE_URL"])
with psycopg.connect(host=c["HOST"], port=c["PORT"], user=c["USER"], dbname=c["NAME"]) as conn:
    print(conn.execute("SHOW data_directory").fetchone()[0])
"""


@pytest.fixture
def embedded_root():
    # Not tmp_path: pytest's base temporary folder is root-only (0700), so the
    # unprivileged account the server runs as under root could not reach it.
    # mkdtemp's folder is root-only too; others may enter it, as a checkout's.
    root = Path(tempfile.mkdtemp(prefix="suite-pg-test-"))
    root.chmod(0o755)
    yield root / "postgres-test"
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_with_nothing_listening_the_command_runs_on_an_embedded_server_on_that_port_stopped_after(
    embedded_root, capfd
):
    port = free_port()
    url = f"postgres://postgres@127.0.0.1:{port}/birthday_scheduler"

    code = run_with_database(url=url, command=[sys.executable, "-c", SHOW_DATA_DIRECTORY], root=embedded_root)

    assert code == 0
    assert capfd.readouterr().out.strip().splitlines()[-1] == str(embedded_root / "data")
    assert not port_is_open(host="127.0.0.1", port=port)


@pytest.mark.slow
@pytest.mark.django_db
def test_a_server_that_answers_is_used_as_it_is(embedded_root, capfd):
    url = database_url(connection.settings_dict)

    code = run_with_database(url=url, command=[sys.executable, "-c", SHOW_DATA_DIRECTORY], root=embedded_root)

    assert code == 0
    assert capfd.readouterr().out.strip() != str(embedded_root / "data")
    assert not embedded_root.exists()


@pytest.mark.slow
def test_a_command_failing_passes_its_exit_code_on(embedded_root):
    url = database_url({**connection.settings_dict, "NAME": "postgres"})

    assert (
        run_with_database(url=url, command=[sys.executable, "-c", "raise SystemExit(3)"], root=embedded_root)
        == 3
    )


def test_a_database_url_that_is_not_postgresql_is_refused(embedded_root, capfd):
    assert run_with_database(url="sqlite:///db.sqlite3", command=["true"], root=embedded_root) == 1
    assert "needs PostgreSQL" in capfd.readouterr().err
