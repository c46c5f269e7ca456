"""The registry's storage: the broker's compacted ``_schemas`` topic, read and written in
the broker's own process.

Why in-process, not through our Kafka client: the registry runs inside ``databus broker``,
so the simplest correct path is the one the group coordinator takes for
``__consumer_offsets``: ``broker.append_durably`` (appended and fsynced, what acks=all
means here) and reading the partition log back.  No connection, no credentials for a
secured listener, no second copy of every record in a client's buffers, and one ordering
of writes — the log's.  A client would only add ways to fail.

The state is always rebuilt from the log: at start by reading the topic from its start,
and before every request by reading what was appended since (by this registry or by anyone
producing to ``_schemas``, e.g. a mirror of a Confluent registry's topic).  Writes are
serialised by one lock: catch up, plan against the state, append, catch up again, so two
registrations can never get the same id or version.
"""

from __future__ import annotations

import logging
import time

import trio

from databus.protocol.records import build_batch, decode_batches

from . import errors, records
from .registry import Registry

log = logging.getLogger("databus.schemas")

TOPIC = "_schemas"
READ_BYTES = 1 << 20
MAX_READ_BYTES = 1 << 28


class Store:
    def __init__(self, broker, topic: str = TOPIC) -> None:
        self.broker = broker
        self.topic = topic
        self.registry = Registry()
        self.position = 0
        self._write_lock = trio.Lock()

    def open(self) -> None:
        """Create the topic if needed (one partition, compacted, Confluent's settings) and
        read it whole."""
        info = self.broker.topic(self.topic)
        if info is None:
            self.broker.create_topic(self.topic, 1, {"cleanup.policy": "compact"})
        elif info.partitions != 1:
            log.warning("%s has %d partitions; the registry reads and writes partition 0 "
                        "only", self.topic, info.partitions)
        started = time.monotonic()
        self.catch_up()
        log.info("schema registry: %d subjects, largest id %d, read from %s in %.2fs",
                 len(self.registry.subjects), self.registry.max_id, self.topic,
                 time.monotonic() - started)

    def _log(self):
        plog = self.broker.get_log(self.topic, 0)
        if plog is None:
            raise errors.store_error(f"the topic {self.topic} does not exist")
        return plog

    def catch_up(self) -> None:
        """Apply every record appended since the last call."""
        plog = self._log()
        if self.position < plog.log_start_offset:
            self.position = plog.log_start_offset
        read_bytes = READ_BYTES
        while self.position < plog.log_end_offset:
            data = bytes(plog.read(self.position, read_bytes))
            progressed = False
            for header, batch in decode_batches(data):
                if header.next_offset <= self.position:
                    continue
                if not header.is_control:
                    for record in batch:
                        if record.offset >= self.position:
                            self._apply(record.offset, record.key, record.value)
                self.position = header.next_offset
                progressed = True
            if not progressed:
                if read_bytes >= MAX_READ_BYTES or not data and read_bytes >= READ_BYTES * 4:
                    log.error("%s: no progress reading at offset %d; the registry stops "
                              "reading there", self.topic, self.position)
                    raise errors.store_error(f"cannot read {self.topic} at offset "
                                             f"{self.position}")
                read_bytes *= 4  # a batch larger than the read: read more at once

    def _apply(self, offset: int, key, value) -> None:
        try:
            self.registry.apply(records.decode(key, value))
        except records.RecordError as exc:
            self.registry.skipped += 1
            log.warning("%s offset %d skipped: %s", self.topic, offset, exc)

    def read(self):
        """The registry, caught up with the log (for a read request)."""
        self.catch_up()
        return self.registry

    async def write(self, plan):
        """Run ``plan(registry) -> (writes, answer)`` under the write lock; append the writes
        durably, apply them, return the answer."""
        async with self._write_lock:
            self.catch_up()
            writes, answer = plan(self.registry)
            if writes:
                now = int(time.time() * 1000)
                batch = build_batch([(key, value, (), now) for key, value in writes])
                try:
                    await self.broker.append_durably(self.topic, 0, batch)
                except errors.RegistryError:
                    raise
                except Exception as exc:  # a storage failure: the log says why
                    log.error("appending to %s failed: %s", self.topic, exc)
                    raise errors.store_error(f"{type(exc).__name__}: {exc}") from None
                self.catch_up()
            return answer
