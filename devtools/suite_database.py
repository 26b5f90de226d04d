"""`make test`'s database: run a command against PostgreSQL at a URL, starting one there if none answers.

`python -m devtools.suite_database URL -- COMMAND...` runs COMMAND with
DATABASE_URL=URL. When a server answers at URL, that is all (the fast path: a
machine's own PostgreSQL, CI's). When nothing listens there and the URL names
this machine, a PostgreSQL of this checkout's own (devtools/postgres.py, data in
var/postgres-test, or as root in this checkout's folder under
/var/lib/birthday-scheduler-dev; kept between runs) is started on the URL's
port for the command and stopped after it, so the URL the suite and its
subprocesses see stays the one given. A server elsewhere that does not answer, or one that
refuses the connection, stops it at once in one line.
"""

import os
import subprocess
import sys
from pathlib import Path

import environ
import psycopg

from devtools.postgres import (
    TEST_DATA,
    EmbeddedPostgres,
    EmbeddedPostgresError,
    port_is_open,
    server_files_directory,
)

BASE_DIR = Path(__file__).resolve().parent.parent
THIS_MACHINE = ("127.0.0.1", "localhost", "::1")


def server_problem(*, config: dict) -> str | None:
    """Why the server at `config` cannot be used, in one line, or None when it answers."""
    try:
        psycopg.connect(
            host=config["HOST"],
            port=config["PORT"],
            user=config["USER"] or "postgres",
            password=config["PASSWORD"] or None,
            dbname="postgres",
            connect_timeout=3,
        ).close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"Cannot use PostgreSQL at {config['HOST']}:{config['PORT']} ({reason})."
    return None


def database_url(config: dict) -> str:
    """The URL of the database a DATABASES entry names: the DATABASE_URL of the processes a test starts on its
    database (with the suite's trust authentication: no password)."""
    return (
        f"postgres://{config['USER'] or 'postgres'}@{config['HOST'] or '127.0.0.1'}:{config['PORT'] or 5432}"
        f"/{config['NAME']}"
    )


def run_with_database(
    *, url: str, command: list[str], root: Path = server_files_directory(checkout=BASE_DIR) / TEST_DATA
) -> int:
    """Run `command` with DATABASE_URL=url, starting an embedded server with its files in `root` if need be."""
    config = environ.Env.db_url_config(url)
    if "postgresql" not in config["ENGINE"]:
        print(f"The test suite needs PostgreSQL; the database URL is {url!r}.", file=sys.stderr)
        return 1
    config["HOST"] = config["HOST"] or "127.0.0.1"
    config["PORT"] = int(config["PORT"] or 5432)
    server = None
    if config["HOST"] in THIS_MACHINE and not port_is_open(host=config["HOST"], port=config["PORT"]):
        print(
            f"No PostgreSQL at {config['HOST']}:{config['PORT']}; starting the embedded one there.",
            flush=True,
        )
        try:
            # Made inside the try: as root, making it copies the binaries, which can fail too.
            server = EmbeddedPostgres(
                root=root,
                port=config["PORT"],
                superuser=config["USER"] or "postgres",
                throwaway=True,
            )
            server.start()
            server.database_ensure(name=config["NAME"])
        except EmbeddedPostgresError as exc:
            print(exc, file=sys.stderr)
            if server is not None:
                server.stop()
            return 1
    try:
        problem = server_problem(config=config)
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return subprocess.run(command, env={**os.environ, "DATABASE_URL": url}).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        if server is not None:
            server.stop()


def main() -> int:
    arguments = sys.argv[1:]
    if len(arguments) < 3 or arguments[1] != "--":
        print("usage: python -m devtools.suite_database DATABASE_URL -- COMMAND...", file=sys.stderr)
        return 2
    return run_with_database(url=arguments[0], command=arguments[2:])


if __name__ == "__main__":
    sys.exit(main())
