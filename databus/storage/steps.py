"""Work split between the owner thread and worker threads, without threads in storage.

Retention and compaction are written as generators (``Steps``) that run on the owner
thread: between ``yield``s they look at and change a log (the segment list, offsets), and
each ``yield`` hands out a callable doing the expensive part (reading, rewriting, fsyncing,
unlinking files), which touches only files and objects the owner no longer or not yet
shares.  The driver runs each callable wherever it likes and sends its result back (or
throws its exception in, so the generator can clean up and go on with the next log):
``run_steps`` runs them inline; the broker runs them with ``trio.to_thread.run_sync``
(databus/broker/retention.py), so the trio thread is never blocked by a large compaction.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

Steps = Generator[Callable[[], Any], Any, list[str]]


def run_steps(steps: Steps) -> list[str]:
    """Run every step inline on the calling thread; the generator's result."""
    result: Any = None
    error: Exception | None = None
    while True:
        try:
            work = steps.throw(error) if error is not None else steps.send(result)
        except StopIteration as done:
            return done.value
        try:
            result, error = work(), None
        except Exception as exc:  # noqa: BLE001  (handed to the generator, which decides)
            result, error = None, exc
