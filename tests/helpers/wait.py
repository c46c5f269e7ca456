"""Wait for something a real process or a real client does in its own time.

    from tests.helpers.wait import wait_for, wait_until

    wait_for(lambda: "databus is up" in log(), "databus up started")             # 60 s
    wait_for(lambda: exported_rows(out) >= n, "the export", timeout=300, log=service.log)
    await wait_until(lambda: service.ready, "the service is ready", timeout=20)   # in trio

``predicate()`` is called until it returns a true value, which is returned; after
``timeout`` seconds an AssertionError says "{what} within {timeout}s", followed by
``log()`` when given (a process's log, so a failure shows what the process was doing).
A deadline, never a fixed sleep: a test waits only as long as the machine needs.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _failure(what: str, timeout: float, log: Callable[[], str] | None) -> AssertionError:
    return AssertionError(f"{what} within {timeout}s" + (f"\n{log()}" if log else ""))


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 60, *,
             interval: float = 0.1, log: Callable[[], str] | None = None) -> T:
    """Poll ``predicate()`` every ``interval`` seconds until it is true; its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _failure(what, timeout, log)
        time.sleep(interval)


async def wait_until(predicate: Callable[[], T | Awaitable[T]], what: str,
                     timeout: float = 60, *, interval: float = 0.05,
                     log: Callable[[], str] | None = None) -> T:
    """``wait_for`` inside trio: the event loop runs while it waits.  ``predicate`` may be
    an async function (one that asks a broker, say)."""
    import trio

    with trio.move_on_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            await trio.sleep(interval)
    raise _failure(what, timeout, log)
