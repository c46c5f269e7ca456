"""An example databus sink plugin: each partition's records as JSON lines, exactly once.

    sinks:
      orders-lines:
        plugin: jsonlines
        topics: [orders]
        config: {path: /srv/lines, flush.size: 1000}

Every file holds consecutive records of one partition and is named
``TOPIC+PARTITION+FIRST+LAST.jsonl`` by its first and last offsets; it is written under a
hidden temporary name, fsynced, then renamed.  ``flush`` reports the offset after the last
file written, so the runtime commits only what is on disk.  After a crash the records after
the last commit come again: ``open`` removes the files written past the committed offset, and
they are written again.  Records without a value are rejected (they go to the sink's
dead-letter topic).
"""

from __future__ import annotations

import base64
import json
import os

import trio

from databus import hookimpl

NAME = "jsonlines"


@hookimpl
def databus_sink_names():
    return [NAME]


@hookimpl
def databus_sink(name, config):
    if name != NAME:
        return None
    unknown = set(config) - {"path", "flush.size"}
    if unknown or "path" not in config:
        raise ValueError(f"{NAME} takes `path` (required) and `flush.size`; got {sorted(config)}")
    return JsonLinesSink(config["path"], int(config.get("flush.size", 1000)))


class JsonLinesSink:
    def __init__(self, path: str, flush_size: int) -> None:
        self.path = path
        self.flush_size = flush_size
        self.buffers: dict[tuple[str, int], list[dict]] = {}
        self.first: dict[tuple[str, int], int] = {}
        self.taken: dict[tuple[str, int], int] = {}  # offset after the last record taken
        self.durable: dict[tuple[str, int], int] = {}  # offset after the last record on disk

    async def open(self, tp, committed):
        self.buffers[tp] = []
        if committed is not None:
            self.durable[tp] = committed
        await trio.to_thread.run_sync(self._remove_uncommitted, tp, committed or 0)

    async def write(self, tp, records):
        rejected = []
        for record in records:
            if record.value is None:
                rejected.append((record, "a record without a value"))
                continue
            if not self.buffers[tp]:
                self.first[tp] = record.offset
            self.buffers[tp].append({
                "offset": record.offset,
                "timestamp": record.timestamp,
                "key": base64.b64encode(record.key).decode() if record.key else None,
                "value": base64.b64encode(record.value).decode(),
            })
        self.taken[tp] = records[-1].offset + 1
        return rejected

    async def flush(self, partitions, force):
        for tp in partitions:
            lines = self.buffers.get(tp)
            if lines and (force or len(lines) >= self.flush_size):
                await trio.to_thread.run_sync(self._write_file, tp, lines)
                self.buffers[tp] = []
            if not self.buffers.get(tp) and tp in self.taken:
                self.durable[tp] = self.taken[tp]  # rejected records at the end count too
        return {tp: self.durable[tp] for tp in partitions if tp in self.durable}

    async def close(self, partitions):
        for tp in partitions:
            for table in (self.buffers, self.first, self.taken, self.durable):
                table.pop(tp, None)

    async def aclose(self):
        pass

    # -- blocking file work, run in a worker thread ------------------------------------------

    def _name(self, tp, first, last):
        return os.path.join(self.path, f"{tp[0]}+{tp[1]}+{first:020d}+{last:020d}.jsonl")

    def _write_file(self, tp, lines):
        os.makedirs(self.path, exist_ok=True)
        final = self._name(tp, self.first[tp], lines[-1]["offset"])
        temporary = os.path.join(self.path, "." + os.path.basename(final) + ".tmp")
        with open(temporary, "w") as f:
            f.writelines(json.dumps(line) + "\n" for line in lines)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, final)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)  # the rename itself is durable
        finally:
            os.close(fd)

    def _remove_uncommitted(self, tp, committed):
        if not os.path.isdir(self.path):
            return
        prefix = f"{tp[0]}+{tp[1]}+"
        for name in os.listdir(self.path):
            if name.startswith(prefix) and int(name.split("+")[2]) >= committed:
                os.remove(os.path.join(self.path, name))
