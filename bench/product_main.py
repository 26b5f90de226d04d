"""Run a product management command, optionally with the benchmark's one work-around.

    .venv/bin/python -m bench.product_main run_worker --concurrency 8

Same as `manage.py ...`. With BENCH_PATCH_LISTENER=1 it first replaces
runtime.wakeup.Listener.wait by a copy that drains queued notifications only
after the first notifies() generator has closed: a drain *inside* that
generator, whose psycopg Connection.lock (a plain, non-reentrant Lock) is still
held, deadlocks the process on the first NOTIFY it receives while idle. The
harness turns the patch on only when its start-up check finds the process
hanging (`Harness.listener_check`, harness.py), so that a checkout with such a
listener can still be measured; the report says so. Product files are not modified.
"""

import os
import sys
import time


def _patch_listener() -> None:
    import psycopg

    from runtime import wakeup

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if not self.enabled:
                self.stop.wait(min(remaining, wakeup._STOP_CHECK_SECONDS))
                continue
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self._connect()
                woken = False
                for _ in self._conn.notifies(
                    timeout=min(remaining, wakeup._STOP_CHECK_SECONDS), stop_after=1
                ):
                    woken = True
                if woken:
                    # The first generator has released the connection's lock: drain now.
                    for _ in self._conn.notifies(timeout=0):
                        pass
                    return True
            except psycopg.Error as exc:
                wakeup.logger.warning(
                    "Notification connection lost; polling until it is back",
                    extra={"channel": self.channel, "error": str(exc).strip()},
                )
                self.close()
                self.stop.wait(min(max(remaining, 0), 1.0))
        return False

    wakeup.Listener.wait = wait


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    if os.environ.get("BENCH_PATCH_LISTENER") == "1":
        _patch_listener()
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *sys.argv[1:]])


if __name__ == "__main__":
    main()
