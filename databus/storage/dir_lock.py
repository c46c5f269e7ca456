"""One owner per data directory: an exclusive ``flock`` on ``DIR/.lock``, as Kafka's LogManager
takes on each log dir.

A second process that opens the same directory (``databus broker`` twice, ``databus up``
twice in one place, the repair tool while the broker runs) fails at once, before it reads or
writes anything else there: two owners would both run recovery and rewrite each other's
index files.  The owner writes its PID into the file so that the refusal can name it; the
lock itself is the kernel's, so it goes with the process, kill -9 included, and a stale
``.lock`` file from a dead owner never blocks anyone.
"""

from __future__ import annotations

import fcntl
import os

LOCK_FILE = ".lock"


class DataDirInUseError(Exception):
    """Another process holds the directory; ``str()`` is the one line to show."""

    def __init__(self, directory: str, pid: int | None) -> None:
        owner = f"process {pid}" if pid else "another process"
        super().__init__(f"data directory {directory} is in use by {owner} "
                         f"(it holds {os.path.join(directory, LOCK_FILE)})")
        self.directory = directory
        self.pid = pid


class DirLock:
    """The held lock on one directory; ``release()`` (or process exit) frees it."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = str(directory)
        self.path = os.path.join(self.directory, LOCK_FILE)
        # O_CREAT without O_TRUNC: opening the file of a live owner changes nothing in it
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirInUseError(self.directory, pid) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = -1

    def __enter__(self) -> DirLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
