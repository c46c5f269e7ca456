"""The one recipe for replacing a file of the data directory durably.

``atomic_write(path, data)``: write ``<path>.tmp``, fsync it, rename it over ``path``, then
fsync the directory (opened with ``O_DIRECTORY``) so the rename itself survives a power
loss.  A crash at any point leaves the old file or the new one, never a torn one; a failure
before the rename removes the temp file and leaves the old file untouched.  Every metadata
file of the data directory (checkpoints, topic metadata, ``meta.properties``, the
producer-id block, the clean-shutdown marker, producer snapshots) is written this way;
compaction's segment swap uses ``fsync_dir`` for its renames.
"""

from __future__ import annotations

import contextlib
import os


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory: makes the creations, renames and unlinks in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes, *, sync: bool = True,
                 mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync directory.

    ``sync=False`` keeps the atomic rename but skips both fsyncs: for files whose loss after
    a crash is harmless (producer snapshots: recovery replays the log instead).  ``mode``
    is the file's from its creation (0o600 for credentials: never readable by others, not
    even for a moment).
    """
    path = os.fspath(path)
    tmp = path + ".tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover would keep its old mode: O_CREAT does not change it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync:
        fsync_dir(os.path.dirname(path) or ".")
