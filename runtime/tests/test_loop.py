"""The process loop's side tasks, heartbeat columns and database outages (runtime.loop)."""

import pytest
from django.db import OperationalError

from runtime.loop import ProcessLoop, SideTask
from runtime.models import ProcessHeartbeat, ProcessKind

# refresh_connection() runs before every step, and it asks Django's connection.
pytestmark = pytest.mark.django_db


class Loop(ProcessLoop):
    kind = ProcessKind.WORKER
    HEARTBEAT_COLUMNS = {"processed": "sent", "succeeded": "delivered", "failed": "dead"}

    def __init__(self, **options):
        super().__init__(interval=1.0, once=False, stop=None, channel="test_loop", **options)
        self.lost = 0
        self.side_tasks.remove(self.heartbeat_task)  # these tests look at their own tasks only

    def database_lost(self) -> None:
        self.lost += 1

    def reported_zone_data(self) -> str:
        return "2025b"


def recorder(calls: list, *, more: int = 0, fail: bool = False):
    def step(*, idle: float):
        calls.append(idle)
        if fail:
            raise OperationalError("server closed the connection unexpectedly")
        return len(calls) <= more

    return step


def test_a_task_runs_when_due_and_then_not_again_until_its_interval_has_passed():
    loop, calls = Loop(), []
    task = SideTask("tidy", 60.0, recorder(calls))
    loop.side_tasks.append(task)

    loop.run_side_tasks()
    loop.run_side_tasks()
    assert len(calls) == 1

    task.last -= 60.0
    loop.run_side_tasks()
    assert len(calls) == 2


def test_a_task_that_says_more_is_waiting_runs_again_on_the_next_turn():
    loop, calls = Loop(), []
    loop.side_tasks.append(SideTask("repair", 300.0, recorder(calls, more=2)))

    for _ in range(4):
        loop.run_side_tasks()

    # twice "more", then done: not again for 300 s
    assert len(calls) == 3


def test_a_task_that_needs_an_idle_spell_waits_for_one_long_enough_and_is_told_its_length():
    loop, calls = Loop(), []
    loop.side_tasks.append(SideTask("prune", 60.0, recorder(calls), min_idle=0.2))

    loop.run_side_tasks()  # busy
    loop.run_side_tasks(idle=0.1)  # too short
    assert calls == []

    loop.run_side_tasks(idle=5.0)
    assert len(calls) == 1 and 4.9 < calls[0] <= 5.0


def test_a_database_error_in_a_side_task_is_logged_not_raised_and_the_others_still_run(caplog):
    loop, failing, fine = Loop(), [], []
    loop.side_tasks += [
        SideTask("renewal", 1.0, recorder(failing, fail=True)),
        SideTask("expiry", 1.0, recorder(fine)),
    ]

    loop.run_side_tasks()

    assert (len(failing), len(fine), loop.lost) == (1, 1, 1)
    assert "Renewal not done: database unavailable" in caplog.text


def test_once_runs_each_task_until_it_has_nothing_more():
    loop, repair, prune = Loop(), [], []
    loop.side_tasks += [
        SideTask("repair", 300.0, recorder(repair, more=3)),
        SideTask("prune", 60.0, recorder(prune)),
    ]

    loop.run_side_tasks_to_the_end()

    assert (len(repair), len(prune)) == (4, 1)


def test_the_heartbeat_writes_the_counters_under_the_columns_this_kind_maps_them_to():
    loop = Loop()
    loop.heartbeat(start=True)
    loop.count(sent=5, delivered=4, dead=1)

    loop.heartbeat()

    row = ProcessHeartbeat.objects.values("kind", "processed", "succeeded", "failed", "stopped_at").get(
        name=loop.name
    )
    assert row == {"kind": "worker", "processed": 5, "succeeded": 4, "failed": 1, "stopped_at": None}
