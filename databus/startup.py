"""Start-up failures as one clear line for the user (``databus broker``, ``up``, ``sidecar``).

A port in use or a directory that cannot be created is an expected problem, not a bug: it is
raised as ``StartupError`` carrying the whole sentence (``cannot listen on 127.0.0.1:9092:
address already in use``) and the command prints it, without a traceback, and exits 1.
The helpers here bind or create *before* anything else is written, so a failed start leaves
nothing behind.
"""

from __future__ import annotations

import os
from pathlib import Path

import trio


class StartupError(Exception):
    """The service cannot start; ``str()`` is the one line to show the user."""


def reason(exc: OSError) -> str:
    """``address already in use``: the OS's words for an error, as the end of a sentence."""
    text = exc.strerror or (os.strerror(exc.errno) if exc.errno else str(exc))
    return text[:1].lower() + text[1:]


def _what(setting: str | None) -> str:
    return f" ({setting})" if setting else ""


async def open_tcp_listeners(
    host: str, port: int, *, setting: str | None = None
) -> list[trio.SocketListener]:
    """Bind ``host:port`` (port 0: any free port); ``setting`` names the config key to fix."""
    try:
        return await trio.open_tcp_listeners(port, host=host or None)
    except OSError as exc:
        raise StartupError(
            f"cannot listen on {host}:{port}{_what(setting)}: {reason(exc)}"
        ) from None


def make_dirs(path: str | os.PathLike, what: str, *, setting: str | None = None) -> None:
    """``mkdir -p`` that fails as ``cannot create WHAT PATH (setting): reason``."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # mkdir's word for "there is a file of that name"
        raise StartupError(f"cannot create {what} {path}{_what(setting)}: a file of that "
                           "name exists") from None
    except OSError as exc:
        raise StartupError(f"cannot create {what} {path}{_what(setting)}: {reason(exc)}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StartupError(f"cannot write to {what} {path}{_what(setting)}: permission denied")


def lock_data_dir(path: str | os.PathLike):
    """Take ``path``'s exclusive lock (storage/dir_lock.py) or fail as one line naming the
    directory and the owner's PID; the lock is held until the returned DirLock is released
    or the process exits."""
    from databus.storage.dir_lock import DataDirInUseError, DirLock

    try:
        return DirLock(path)
    except DataDirInUseError as exc:
        raise StartupError(str(exc)) from None
    except OSError as exc:
        raise StartupError(f"cannot lock data directory {path}: {reason(exc)}") from None


def leaves(error: BaseException):
    """The exceptions inside (nested) exception groups, or ``error`` itself."""
    if isinstance(error, BaseExceptionGroup):
        for exc in error.exceptions:
            yield from leaves(exc)
    else:
        yield error
