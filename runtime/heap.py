"""A long-running process's garbage collector: its start-up heap set aside, young objects collected less often.

A worker or scheduler starts by importing Django, the apps, aiohttp and their
modules: about 110,000 objects the cyclic collector tracks and that live as
long as the process. CPython's default thresholds (700, 10, 10) then run a
young collection every 700 net allocations and, as what survives piles up, a
full one that walks all 110,000 again. A worker sending 3,000-4,000
deliveries a second ran about 10,000 collections in 100,000 deliveries, 77 of
them full: 6 s of the run's 26 s of CPU (bench/results/REPORT-queued.md).

Inside `heap_settled()` the start-up heap is frozen (gc.freeze: moved to a
generation no collection walks; its objects are still freed when nothing refers
to them) and a young collection waits for YOUNG_THRESHOLD net allocations. What
a request allocates is nearly all freed by its reference count at once, so the
young generation seldom fills: the same 100,000 deliveries ran one collection.
Cyclic garbage still goes, at most YOUNG_THRESHOLD objects later.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

# A young collection after this many more allocations than frees of tracked objects (CPython's default: 700);
# a middle one after this many young ones (default 10). Measured at 100,000 deliveries, one worker, in turns:
# freezing alone made it 1.21x, with these thresholds 1.32x; 5,000 gave 1.28x.
YOUNG_THRESHOLD = 20_000
MIDDLE_THRESHOLD = 20


@contextmanager
def heap_settled() -> Iterator[None]:
    """In this block the heap as it stands is frozen and young collections are rarer; both undone after it.

    Undone so that a caller that goes on (a test's call_command, a --once run)
    gets its collector back as it was.
    """
    before = gc.get_threshold()
    gc.collect()  # the start-up's own garbage goes now, not into the frozen generation
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, before[2])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
