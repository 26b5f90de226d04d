"""`make run`: start the whole product on this machine and stop it cleanly on Ctrl-C.

Starts the web server (API and admin), one scheduler, one worker and a local
webhook sink that shows the messages as they arrive. Each process's output is
prefixed with its name. Ctrl-C (or SIGTERM) is passed on to every child, which
then drain and exit.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
HOST = os.environ.get("RUN_HOST", "127.0.0.1")
PORT = int(os.environ.get("RUN_PORT", "8000"))
SINK_PORT = int(os.environ.get("RUN_SINK_PORT", "8001"))


def processes() -> dict[str, list[str]]:
    manage = [sys.executable, str(BASE_DIR / "manage.py")]
    return {
        "sink": [sys.executable, "-m", "devtools.sink", "--host", HOST, "--port", str(SINK_PORT)],
        "web": manage + ["runserver", f"{HOST}:{PORT}", "--noreload"],
        "scheduler": manage + ["run_scheduler"],
        "worker": manage + ["run_worker"],
    }


def _pump(name: str, stream) -> None:
    for line in iter(stream.readline, ""):
        sys.stdout.write(f"{name:>9} | {line}")
        sys.stdout.flush()


def main() -> int:
    # Settings in .env count as set, so a WEBHOOK_URL there is not overridden below.
    if (BASE_DIR / ".env").exists():
        environ.Env.read_env(str(BASE_DIR / ".env"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # Without a receiver of your own, messages go to the local sink.
    env.setdefault("WEBHOOK_URL", f"http://{HOST}:{SINK_PORT}/webhook")
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

    admin_url = os.environ.get("ADMIN_URL", "admin/").strip("/")
    lines = [
        f"API:       http://{HOST}:{PORT}/api/v1/users/",
        f"API docs:  http://{HOST}:{PORT}/api/v1/docs/ (OpenAPI: /api/v1/schema/)",
        f"Health:    http://{HOST}:{PORT}/health/ready  Metrics: http://{HOST}:{PORT}/metrics",
        f"Admin:     http://{HOST}:{PORT}/{admin_url}/",
        f"Webhooks:  POSTed to {env['WEBHOOK_URL']}",
    ]
    if env["WEBHOOK_URL"].startswith(f"http://{HOST}:{SINK_PORT}/"):
        lines.append(f"Received:  http://{HOST}:{SINK_PORT}/ (and the 'sink' lines below)")
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
