"""Time-ordered UUIDs (version 7, RFC 9562) for rows written in bulk.

A random (version 4) primary key sends every insert to a random page of the
key's index; on a table larger than PostgreSQL's shared buffers each of those
is a page read and, after a checkpoint, a full page image in the WAL. Version 7
keys start with the time in milliseconds, so rows written together sit
together in the index, and rows claimed together (a year later, in target
order) were mostly written together. Python 3.11 has no uuid.uuid7 (3.14 has).

Written here rather than taken from uuid-utils or uuid6: uuid6 builds its own
UUID subclass more slowly than this; uuid-utils is faster by a little, but its
Rust generator keeps its state across fork() (gunicorn forks its workers), so
every child would have to reseed it by hand, where the random module reseeds
itself in each child.
"""

from __future__ import annotations

import random
import time
import uuid

_RANDOM_62 = (1 << 62) - 1


def uuid7() -> uuid.UUID:
    """48 bits of Unix time in ms, version 7, 74 random bits, the RFC 4122 variant.

    The random bits come from the random module, not os.urandom: an id must be
    unique, not unguessable (RFC 9562 leaves that choice to the application),
    and a system call per id would be a visible share of the scheduler's
    claim. The generator is seeded from os.urandom at start and reseeded in
    every forked child, so processes do not share sequences.
    """
    ms = time.time_ns() // 1_000_000
    rand = random.getrandbits(74)
    return uuid.UUID(
        int=(ms & 0xFFFF_FFFF_FFFF) << 80 | 0x7 << 76 | (rand >> 62) << 64 | 0b10 << 62 | rand & _RANDOM_62
    )
