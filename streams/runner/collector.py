"""Rare garbage collections while a batch job runs: the cycle collector tuned for deciding in bulk.

Deciding a chunk or restoring a batch of links allocates hundreds of thousands of
short-lived objects (documents, links, writes, SQL and script arguments) that reference
counting frees; none of them form cycles. Python's default makes the cycle collector walk
the young objects every 700 allocations, and every tenth of those walks the middle
generation too: measured, a few percent of `dedup run`'s CPU time (bench_cascade.py's
combined measurement: 3.73-3.97 s against 3.54-3.60 s for 50,000 articles with a young
collection every 50,000 allocations) and a sixth of `dedup replay`'s client time (96
against 79 us a link with collections off). What the process held before (settings,
clients, the model) is frozen out of every collection. Python has no per-scope setting,
hence this one context manager, used by the batch commands only (`dedup run`, `dedup
replay`); cycles still get collected, 70 times less often.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNG_ALLOCATIONS = 50_000
"""Allocations between two young collections inside `rare_collections` (Python's default: 700)."""


@contextmanager
def rare_collections() -> Iterator[None]:
    """Young collections every `YOUNG_ALLOCATIONS` allocations, what exists now frozen; both undone on exit."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(YOUNG_ALLOCATIONS, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()
