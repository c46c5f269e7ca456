"""The one recipe for replacing a file of the data directory durably.

``atomic_write(path, data)``: write ``<path>.tmp``, fsync it, rename it over ``path``, then
fsync the directory (opened with ``O_DIRECTORY``) so the rename itself survives a power
loss.  A crash at any point leaves the old file or the new one, never a torn one; a failure
before the rename removes the temp file and leaves the old file untouched.  Every metadata
file of the data directory (checkpoints, topic metadata, ``meta.properties``, the
producer-id block, the clean-shutdown marker, producer snapshots) is written this way;
compaction's segment swap uses ``fsync_dir`` for its renames.

``fsync_all(files)``: fsync several descriptors at once, the group commit's step (a log's
segment and its two indexes).  On ext4 each fsync ends with a journal commit; done one after
the other, three files wait for three commits (~10 ms on this project's test machine), while
fsyncs running at the same time join one commit (~0.5 ms).  Each call still returns only
when its own file is on disk, so nothing is weaker than fsyncing them in turn.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor

# Threads that fsync beside the callers' (fsync releases the interpreter): a log's flush
# takes one descriptor itself and hands its other two here, so 8 serve four logs flushed at
# once; more would only queue behind the same journal commit.
_FSYNC_THREADS = 8
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory: makes the creations, renames and unlinks in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_all(files: list[tuple[int, str]]) -> None:
    """fsync every ``(fd, path)`` concurrently; returns once all are done.  Raises the first
    failure's ``OSError`` (with its path as ``filename``) after all have finished, so the
    caller may close the descriptors."""
    if not files:
        return
    global _pool
    futures = []
    if len(files) > 1:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(_FSYNC_THREADS, thread_name_prefix="databus-fsync")
        futures = [_pool.submit(_fsync, fd, path) for fd, path in files[1:]]
    errors = [_fsync(*files[0])]
    errors += [future.result() for future in futures]
    for error in errors:
        if error is not None:
            raise error


def _fsync(fd: int, path: str) -> OSError | None:
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.filename is None:
            exc.filename = path
        return exc
    return None


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


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike, *, temporary: str | os.PathLike | None = None):
    """``atomic_write`` for data written piece by piece: ``with atomic_writer(path) as f``
    yields a binary file; on leaving, it is fsynced, renamed over ``path`` and the directory
    fsynced.  ``temporary`` (default ``path + ".tmp"``) is where it is written meanwhile (a
    name readers skip); on an error it is removed and ``path`` is untouched."""
    path = os.fspath(path)
    tmp = os.fspath(temporary) if temporary is not None else path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")
