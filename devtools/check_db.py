"""Fail fast, in one line, when the test database server cannot be reached."""

import os
import sys

import environ
import psycopg


def main() -> int:
    url = os.environ.get("DATABASE_URL", "")
    config = environ.Env.db_url_config(url)
    if "postgresql" not in config["ENGINE"]:
        print(f"The test suite needs PostgreSQL; DATABASE_URL is {url!r}.", file=sys.stderr)
        return 1
    try:
        psycopg.connect(
            host=config["HOST"] or "127.0.0.1",
            port=config["PORT"] or 5432,
            user=config["USER"] or "postgres",
            password=config["PASSWORD"] or None,
            dbname="postgres",
            connect_timeout=3,
        ).close()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(
            f"Cannot reach PostgreSQL at {config['HOST'] or '127.0.0.1'}:{config['PORT'] or 5432} "
            f"({reason}); start it with: "
            "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
