"""Time-ordered ids: valid version-7 UUIDs, ordered by their millisecond, never repeated."""

import time
import uuid

from runtime.ids import uuid7


def test_ids_are_version_7_uuids_of_the_rfc_variant():
    ids = [uuid7() for _ in range(1000)]

    assert {i.version for i in ids} == {7}
    assert {i.variant for i in ids} == {uuid.RFC_4122}


def test_ids_start_with_the_time_in_milliseconds_so_later_ids_sort_later():
    before = time.time_ns() // 1_000_000
    first = uuid7()
    time.sleep(0.002)
    second = uuid7()
    after = time.time_ns() // 1_000_000

    assert before <= first.int >> 80 <= after
    assert first < second


def test_a_hundred_thousand_ids_in_a_burst_are_all_different():
    ids = {uuid7() for _ in range(100_000)}

    assert len(ids) == 100_000
