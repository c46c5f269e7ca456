"""Starting ``databus broker`` as a child process: how the launcher learns where it listens,
and how the child stops when its launcher dies.  Shared by ``BrokerProcess`` (tests,
benchmarks) and ``databus up``'s built-in broker.

Ready file (``--ready-file PATH``): once the broker accepts connections it writes
``{"host": ..., "port": ..., "pid": ..., "listeners": {NAME: port, ...}}`` to PATH
atomically (host and port: the first listener's) (a temporary file renamed over
it), so a reader never sees half of it.  A broker that cannot start (port in use, data
directory not creatable) writes ``{"error": "the one-line reason"}`` there instead of printing
it, and exits 1: the launcher tells the user in its own words, once.  The file is removed
when the broker stops.  Launchers poll the file (a few reads a second while starting)
instead of parsing the broker's log.

Lifeline (``--lifeline-fd FD``): the launcher keeps the write end of a pipe and the broker
holds the read end; when the launcher exits for any reason, kill -9 included, the kernel
closes the write end, the broker reads end-of-file and shuts down cleanly, as on SIGTERM.
This replaces ``PR_SET_PDEATHSIG``, which fires when the *thread* that forked the child ends
(trio forks from a worker thread that it retires after 10 s idle), and also works off Linux.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Ready:
    """What the ready file says: the bound address, or why the broker could not start."""

    host: str = ""
    port: int = 0
    error: str | None = None
    listeners: dict[str, int] | None = None  # listener name -> bound port
    schema_registry: str | None = None  # the schema registry's URL (schema.registry.listen)


def write_ready_file(path: str | os.PathLike, **fields) -> None:
    """Write the JSON object ``fields`` to ``path`` atomically: a launcher polling for it
    sees no file or the whole object, never half of it.  No fsync: it lives for one run."""
    from databus.storage.durable import atomic_write

    atomic_write(path, (json.dumps(fields) + "\n").encode(), sync=False)


def read_ready_file(path: str | os.PathLike) -> Ready | None:
    """The ready file's content, or None while there is none (the broker is starting)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return None
    if "error" in data:
        return Ready(error=str(data["error"]))
    return Ready(host=str(data["host"]), port=int(data["port"]),
                 listeners={str(k): int(v) for k, v in data.get("listeners", {}).items()},
                 schema_registry=data.get("schema_registry"))


def remove_ready_file(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class BrokerLaunch:
    """One start of a broker child: ``args`` for its command line, ``pass_fds`` for the
    spawn call, then ``spawned()``; ``poll()`` until it returns a ``Ready``; ``close()`` when
    the child is gone (closing the lifeline earlier stops the child cleanly)."""

    def __init__(self, ready_file: str | os.PathLike) -> None:
        self.ready_file = Path(ready_file)
        remove_ready_file(self.ready_file)  # a stale one would announce a dead broker
        self._child_end, self._parent_end = os.pipe()  # both close-on-exec by default

    @property
    def args(self) -> list[str]:
        return ["--ready-file", str(self.ready_file), "--lifeline-fd", str(self._child_end)]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self._child_end,)

    def spawned(self) -> None:
        """The child has its copy of the read end; the launcher has no use for its own."""
        if self._child_end >= 0:
            os.close(self._child_end)
            self._child_end = -1

    def poll(self) -> Ready | None:
        return read_ready_file(self.ready_file)

    def close(self) -> None:
        self.spawned()
        if self._parent_end >= 0:
            os.close(self._parent_end)
            self._parent_end = -1
        remove_ready_file(self.ready_file)
