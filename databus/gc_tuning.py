"""Cyclic-GC settings for databus's own long-running processes (the sidecar, the broker).

Their hot paths allocate a few short-lived containers per message (decoded frames, record
tuples, requests) while many live ones wait (queued batches, in-flight requests).  With
CPython's default young-generation threshold (700) the collector runs every few hundred
messages and rescans what is alive; measured in the sidecar that was ~20% of its CPU, and
full collections over everything imported at start (kio's thousands of schema classes,
pydantic models) are the long pauses.  So: what exists once start-up is done is frozen out
of collection, and young collections run every 50 000 allocations instead.

Only processes databus owns call this; the SDK, a library inside someone's app, never
changes the app's collector.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def tune_for_service() -> None:
    """Call once, after the imports and configuration, before serving."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 100)
