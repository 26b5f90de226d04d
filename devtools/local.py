"""`make run`: start the whole product on this machine and stop it cleanly on Ctrl-C.

Without a DATABASE_URL (in the environment or .env), first starts PostgreSQL of
this checkout's own (devtools/postgres.py: data in var/postgres, or as root in
this checkout's folder under /var/lib/birthday-scheduler-dev) at the settings'
LOCAL_DATABASE_URL. Then migrates, collects the static files and makes sure of a
local admin, and starts the web server (API and admin), one scheduler, one
worker and a local sink that shows the messages as they arrive (POSTed, or mailed
to its SMTP port, LOCAL_SMTP_PORT in the processes' environment); on an
empty database, a first recipient's greeting is sent at once (devtools/demo.py). Each
process's output is prefixed with its name. Ctrl-C (or SIGTERM) is passed on to
every child, which then drain and exit; the embedded PostgreSQL stops last.
"""

import ipaddress
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import environ

from devtools.postgres import RUN_DATA, EmbeddedPostgres, EmbeddedPostgresError, server_files_directory

BASE_DIR = Path(__file__).resolve().parent.parent
HOST = os.environ.get("RUN_HOST", "127.0.0.1")
PORT = int(os.environ.get("RUN_PORT", "8000"))
SINK_PORT = int(os.environ.get("RUN_SINK_PORT", "8001"))
# The sink's SMTP port (aiosmtpd's own default): the relay of a local email destination.
SMTP_PORT = int(os.environ.get("RUN_SMTP_PORT", "8025"))


def processes() -> dict[str, list[str]]:
    manage = [sys.executable, str(BASE_DIR / "manage.py")]
    return {
        "sink": [
            sys.executable,
            "-m",
            "devtools.sink",
            "--host",
            HOST,
            "--port",
            str(SINK_PORT),
            "--smtp-port",
            str(SMTP_PORT),
        ],
        "web": manage + ["runserver", f"{HOST}:{PORT}", "--noreload"],
        "scheduler": manage + ["run_scheduler"],
        "worker": manage + ["run_worker"],
    }


def sink_networks() -> str:
    """WEBHOOK_ALLOWED_NETWORKS for the sink: loopback, and RUN_HOST when it is an address of another network."""
    networks = ["127.0.0.0/8", "::1/128"]
    try:
        host = ipaddress.ip_address(HOST)
    except ValueError:
        return ",".join(networks)  # a name such as localhost: loopback
    if not any(host in ipaddress.ip_network(network) for network in networks):
        networks.append(str(ipaddress.ip_network(host)))
    return ",".join(networks)


def _pump(name: str, stream) -> None:
    for line in iter(stream.readline, ""):
        sys.stdout.write(f"{name:>9} | {line}")
        sys.stdout.flush()


def embedded_postgres_start() -> EmbeddedPostgres:
    """Start the PostgreSQL of LOCAL_DATABASE_URL with its data in this checkout's server files, and its database."""
    # The settings own the URL, so that manage.py typed by hand finds the same
    # server; they are imported only for it (the children read them themselves).
    from config.settings import LOCAL_DATABASE_URL

    config = environ.Env.db_url_config(LOCAL_DATABASE_URL)
    root = server_files_directory(checkout=BASE_DIR) / RUN_DATA
    server = EmbeddedPostgres(root=root, port=int(config["PORT"]), superuser=config["USER"])
    server.start()
    server.database_ensure(name=config["NAME"])
    print(f"PostgreSQL: {LOCAL_DATABASE_URL} (embedded, data in {server.data})", flush=True)
    return server


def prepare(env: dict[str, str]) -> None:
    """Bring the database and the static files up to date, and print the local admin's credentials."""
    manage = [sys.executable, str(BASE_DIR / "manage.py")]
    for command in (
        ["migrate", "--noinput", "--verbosity", "0"],
        ["collectstatic", "--noinput", "-v0"],
        ["ensure_local_admin"],
    ):
        subprocess.run(manage + command, cwd=BASE_DIR, env=env, check=True)


def main() -> int:
    # Until the processes run, SIGTERM stops this like Ctrl-C does, through the
    # `finally` that stops the embedded PostgreSQL.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    # Settings in .env count as set, so a WEBHOOK_URL or DATABASE_URL there is not overridden below.
    if (BASE_DIR / ".env").exists():
        environ.Env.read_env(str(BASE_DIR / ".env"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Without a receiver of your own, messages go to the local sink.
    env.setdefault("WEBHOOK_URL", f"http://{HOST}:{SINK_PORT}/webhook")
    # The sink is plain http on this machine, which the worker refuses unless allowed
    # (delivery/receivers/addresses.py); values of your own in .env or the environment win.
    env.setdefault("WEBHOOK_ALLOW_HTTP", "true")
    env.setdefault("WEBHOOK_ALLOWED_NETWORKS", sink_networks())
    # Where the sink takes mail: the demo's email destination relays to it.
    env["LOCAL_SMTP_HOST"] = HOST
    env["LOCAL_SMTP_PORT"] = str(SMTP_PORT)
    server = None
    if not env.get("DATABASE_URL"):
        try:
            server = embedded_postgres_start()
        except EmbeddedPostgresError as exc:
            print(exc, file=sys.stderr, flush=True)
            return 1
    try:
        prepare(env)
        return supervise(env)
    except subprocess.CalledProcessError as exc:
        print(f"{' '.join(exc.cmd[1:])} failed (exit {exc.returncode}).", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        if server is not None:
            server.stop()
            print("PostgreSQL stopped.", flush=True)


def supervise(env: dict[str, str]) -> int:
    """Start every process, pass Ctrl-C on to them, and return once all have exited."""
    children: dict[str, subprocess.Popen] = {}
    for name, command in processes().items():
        child = subprocess.Popen(
            command,
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # Ctrl-C reaches them through us, once
        )
        children[name] = child
        threading.Thread(target=_pump, args=(name, child.stdout), daemon=True).start()

    # On an empty database, a first recipient whose greeting goes out at once.
    demo = subprocess.Popen(
        [sys.executable, "-m", "devtools.demo"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    threading.Thread(target=_pump, args=("demo", demo.stdout), daemon=True).start()

    admin_url = os.environ.get("ADMIN_URL", "admin/").strip("/")
    lines = [
        f"API:       http://{HOST}:{PORT}/api/v1/users/",
        f"API docs:  http://{HOST}:{PORT}/api/v1/docs/ (OpenAPI: /api/v1/schema/)",
        f"Health:    http://{HOST}:{PORT}/health/ready  Metrics: http://{HOST}:{PORT}/metrics",
        f"Admin:     http://{HOST}:{PORT}/{admin_url}/",
        f"Webhooks:  POSTed to {env['WEBHOOK_URL']}",
    ]
    lines.append(
        f"Email:     relay {HOST}:{SMTP_PORT} (the sink's SMTP, no TLS): give it to an email destination"
    )
    lines.append(
        f"Received:  http://{HOST}:{SINK_PORT}/ (webhooks, chat and mail; and the 'sink' lines below)"
    )
    lines.append("Stop everything with Ctrl-C.")
    print("\n" + "\n".join(f"  {line}" for line in lines) + "\n", flush=True)

    stopping = threading.Event()

    def stop(signum, frame):
        stopping.set()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    while not stopping.is_set():
        if any(child.poll() is not None for child in children.values()):
            dead = [n for n, c in children.items() if c.poll() is not None]
            print(f"Process {', '.join(dead)} exited; stopping the rest.", flush=True)
            break
        time.sleep(0.2)

    for child in children.values():
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
    print("Stopped.", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
