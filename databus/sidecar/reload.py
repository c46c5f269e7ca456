"""Hot reload triggers: SIGHUP, and the config file's mtime (polled; no extra dependency).

Both end in ``Sidecar.reload_from_file``, which validates the whole file and applies it or
logs why not and keeps the old config.  A change is recognised by (mtime, size, inode), so an
editor that replaces the file by renaming a new one over it is seen too.
"""

from __future__ import annotations

import logging
import os
import signal

import trio

log = logging.getLogger("databus.sidecar.reload")


def _stamp(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


async def watch_config(sidecar) -> None:
    async with trio.open_nursery() as nursery:
        if hasattr(signal, "SIGHUP"):
            nursery.start_soon(_on_sighup, sidecar)
        await _poll(sidecar)


async def _on_sighup(sidecar) -> None:
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            log.info("SIGHUP: reloading %s", sidecar.config_path)
            await sidecar.reload_from_file()


async def _poll(sidecar) -> None:
    last = _stamp(sidecar.config_path)
    while True:
        interval = sidecar.config.sidecar.reload_poll_ms / 1000
        if interval <= 0:  # file watching is off; a SIGHUP reload may turn it back on
            await trio.sleep(1)
            continue
        await trio.sleep(interval)
        stamp = _stamp(sidecar.config_path)
        if stamp is not None and stamp != last:
            last = stamp
            log.info("%s changed: reloading", sidecar.config_path)
            await sidecar.reload_from_file()
