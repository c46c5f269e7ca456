"""Hot reload triggers: SIGHUP, and the config file's mtime (polled; no extra dependency).

Both end in the service's ``reload_from_file`` (the sidecar's, ``databus mirror``'s), which
validates the whole file and applies it or logs why not and keeps the old config.  A change is recognised by (mtime, size, inode), so an
editor that replaces the file by renaming a new one over it is seen too.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger("databus.reload")


def _stamp(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


async def watch_config(sidecar, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Reload on SIGHUP and on a change of the file (without a file, SIGHUP is logged as
    having nothing to reload: it never kills the process).  Started with ``nursery.start`` it
    returns once both are armed (the SIGHUP handler installed, the file's stamp taken): an
    edit or a SIGHUP right after start-up is then seen, and a SIGHUP never meets Python's
    default action (terminate)."""
    async with trio.open_nursery() as nursery:
        if hasattr(signal, "SIGHUP"):
            await nursery.start(_on_sighup, sidecar)
        if sidecar.config_path is None:  # started without a file: SIGHUP only says so
            task_status.started()
            await trio.sleep_forever()
        await poll_file(
            sidecar.config_path,
            lambda: sidecar.config.sidecar.reload_poll_ms / 1000,
            sidecar.reload_from_file,
            task_status=task_status,
        )


async def _on_sighup(sidecar, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            if sidecar.config_path is None:
                log.info("SIGHUP: no configuration file (started without -c and no "
                         "./sidecar.yaml): nothing to reload")
                continue
            # DEBUG: the reload itself logs its outcome once, whichever trigger fired
            # (SIGHUP and the file watch often both fire for one edit).
            log.debug("SIGHUP: reloading %s", sidecar.config_path)
            await sidecar.reload_from_file()


async def poll_file(
    path, interval: Callable[[], float], on_change: Callable[[], Awaitable[object]], *,
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    """Every ``interval()`` seconds (read again each time: a reload may change it), look at
    ``path``; when its stamp changed, await ``on_change()``.  An interval <= 0 turns
    watching off until it turns positive again (looked at every second); a change made
    meanwhile is seen then.  A missing file is no change (an editor's rename is under way,
    or it was removed: the config in use stays)."""
    last = _stamp(path)
    task_status.started()
    while True:
        seconds = interval()
        if seconds <= 0:
            await trio.sleep(1)
            continue
        await trio.sleep(seconds)
        stamp = _stamp(path)
        if stamp is not None and stamp != last:
            last = stamp
            log.debug("%s changed: reloading", path)
            await on_change()
