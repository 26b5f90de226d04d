"""The worker's two central modules stay small enough to read whole (issue 36: each under 300 lines).

worker.py runs the turn and lanes.py decides what may go out; what grows in
either belongs in a module of its own (claimer, takeover, lane, lane_settings,
worker_tasks), as it did when they were split.
"""

from pathlib import Path

import pytest

DELIVERY = Path(__file__).resolve().parent.parent
MOST_LINES = 299


@pytest.mark.parametrize("module", ["worker.py", "lanes.py"])
def test_module_stays_under_300_lines(module):
    lines = len((DELIVERY / module).read_text().splitlines())
    assert lines <= MOST_LINES, (
        f"delivery/{module} has {lines} lines; split what grew into a module of its own"
    )
