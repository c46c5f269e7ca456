"""Where a produced message's time goes: per-batch timestamps from the broker and the
sidecar's producer, for ``databus bench sidecar --breakdown``.

Off unless the environment variable ``DATABUS_LATENCY_TRACE`` names a directory when the
process starts (the benchmark sets it for the broker and sidecar it launches); then each
process appends one tab-separated line per produced batch to ``<dir>/<role>-<pid>.tsv``:

* ``broker``: ``topic partition base_offset last_offset start appended round_start
  round_end answered`` -- the Produce handler began, the batch was appended, the group
  commit's fsync round that covered it began and ended (empty for acks=0/1), the answer was
  ready to write (every partition of the request durable);
* ``producer`` (our Kafka client, as the sidecar uses it): ``topic partition base_offset
  count created sent answered appends`` -- the batch was opened (linger starts), its Produce
  request was written, the broker's answer was read; ``appends``: ``count@time`` after each
  bulk append (``Producer.send_batch``, the sidecar's path), comma-separated, so record
  ``i`` of the batch was queued at the time of the first count above ``i``.

Times are ``time.perf_counter()`` seconds: CLOCK_MONOTONIC on Linux, one clock for every
process of the machine, so the benchmark can line the processes' stamps up per message
(by topic, partition and offset).  Off, the cost is one ``is None`` test per request.
"""

from __future__ import annotations

import os

ENV = "DATABUS_LATENCY_TRACE"
ROLES = ("broker", "producer")

_directory = os.environ.get(ENV) or None
_recorders: dict[str, Recorder] = {}


class Recorder:
    __slots__ = ("_file",)

    def __init__(self, path: str) -> None:
        # Line-buffered: a few hundred lines a second, and whatever was written is in the
        # file even if the process is killed rather than stopped.
        self._file = open(path, "a", buffering=1)  # noqa: SIM115  (open for the process)

    def write(self, *fields) -> None:
        self._file.write("\t".join("" if f is None else repr(f) if type(f) is float else
                                   str(f) for f in fields) + "\n")


def recorder(role: str) -> Recorder | None:
    """The process's recorder for ``role`` (one of ROLES), or None when tracing is off."""
    if _directory is None:
        return None
    found = _recorders.get(role)
    if found is None:
        if role not in ROLES:
            raise ValueError(f"unknown latency trace role {role!r} (known: {', '.join(ROLES)})")
        os.makedirs(_directory, exist_ok=True)
        found = _recorders[role] = Recorder(
            os.path.join(_directory, f"{role}-{os.getpid()}.tsv"))
    return found


def read(directory: str, role: str) -> list[list[str]]:
    """Every line ``role`` processes wrote under ``directory``, split into fields."""
    rows: list[list[str]] = []
    for name in sorted(os.listdir(directory)) if os.path.isdir(directory) else ():
        if name.startswith(role + "-") and name.endswith(".tsv"):
            with open(os.path.join(directory, name)) as f:
                rows.extend(line.rstrip("\n").split("\t") for line in f if line.strip())
    return rows
