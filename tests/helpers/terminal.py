"""Run a command with its stdout on a pseudo-terminal of a given size, as a user's shell would.

    text = run_in_terminal([sys.executable, "-m", "databus.cli", "groups", ...], columns=80)

The child sees a real terminal (isatty() is true, the window is ``columns`` wide) and no
COLUMNS/LINES/FORCE_COLOR/TTY_COMPATIBLE/NO_COLOR overrides (``without_overrides``), so it
sizes its output from the terminal itself.  Returns what it wrote to stdout with ANSI styling and the terminal's "\\r"
removed; stderr is captured separately and put in the error if the exit status is not 0.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import tempfile
import termios
import time

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_OVERRIDES = ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "TERM")


def without_overrides(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: ours) without the variables that change how output is sized or
    styled, so a child decides from its real stdout alone."""
    return {k: v for k, v in (env or os.environ).items() if k not in _OVERRIDES}


def run_in_terminal(argv: list[str], *, columns: int, rows: int = 24, timeout: float = 60.0,
                    env: dict[str, str] | None = None) -> str:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    child_env = {**without_overrides(env), "TERM": "xterm-256color"}
    # stderr into a file, not a pipe: a chatty stderr cannot block the child
    with tempfile.TemporaryFile() as err:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave,
                                       stderr=err, env=child_env)
        finally:
            os.close(slave)
        try:
            out = _read_until_closed(master, process, timeout)
        finally:
            os.close(master)
            process.wait(timeout=timeout)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    if process.returncode != 0:
        raise AssertionError(f"{argv} exited {process.returncode}: {stderr}")
    return _ANSI.sub("", out.decode()).replace("\r", "")


def _read_until_closed(master: int, process, timeout: float) -> bytes:
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            process.kill()
            raise AssertionError(f"{process.args} still running after {timeout}s")
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal's last writer
            return b"".join(chunks)
        if not data:
            return b"".join(chunks)
        chunks.append(data)
