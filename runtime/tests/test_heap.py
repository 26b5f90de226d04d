"""The long-running commands' garbage collector (runtime.heap): the start-up heap frozen while the loop runs."""

import gc

import pytest
from django.core.management import call_command

from delivery.worker.loop import Worker
from runtime.heap import MIDDLE_THRESHOLD, YOUNG_THRESHOLD, heap_settled


class Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_inside_the_heap_is_frozen_and_young_collections_wait_longer_and_after_it_both_are_as_before():
    before = gc.get_threshold()
    with heap_settled():
        assert gc.get_freeze_count() > 10_000  # Django, the apps and the libraries, set aside
        assert gc.get_threshold() == (YOUNG_THRESHOLD, MIDDLE_THRESHOLD, before[2])
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_cyclic_garbage_made_inside_is_still_collected_by_itself():
    with heap_settled():
        collected_before = sum(stats["collected"] for stats in gc.get_stats())
        for _ in range(3 * YOUNG_THRESHOLD):
            Cycle()
        # No gc.collect(): the young generation filled, and its collections freed the cycles.
        assert sum(stats["collected"] for stats in gc.get_stats()) - collected_before >= YOUNG_THRESHOLD


def test_the_thresholds_are_restored_when_the_loop_raises():
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), heap_settled():
        raise RuntimeError("the loop failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


@pytest.mark.django_db(transaction=True)
def test_run_worker_runs_its_loop_with_the_heap_settled(monkeypatch):
    seen = []

    def run(self) -> int:
        seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))
        return 0

    monkeypatch.setattr(Worker, "run", run)
    call_command("run_worker", once=True, metrics_port=0)
    assert len(seen) == 1
    frozen, young = seen[0]
    assert frozen > 10_000 and young == YOUNG_THRESHOLD
    assert gc.get_freeze_count() == 0
