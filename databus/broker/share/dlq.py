"""Dead-letter topics of share groups (KIP-1191, Kafka 4.4).

A share group with the group config ``errors.deadletterqueue.topic.name`` set gets a copy of
every record that a consumer REJECTs, and of every record whose delivery count reached
``share.delivery.count.limit`` (released or its lock expired once too often), on that topic.
The copy carries Kafka's context headers (``__dlq.errors.topic``, ``.partition``,
``.offset``, ``.group``, ``.delivery.count``, ``.message``); the original key and value only
with ``errors.deadletterqueue.copy.record.enable=true`` (Kafka's default is a record of
headers alone).  It goes to partition ``source partition % DLQ partitions``.

The rules on the topic are Kafka's: its name must start with the broker's
``errors.deadletterqueue.topic.name.prefix`` (``dlq.``) and not with ``__``; an existing
topic takes dead letters only with the topic config ``errors.deadletterqueue.group.enable=
true``; a missing one is created with it on first use (when
``errors.deadletterqueue.auto.create.topics.enable``).

As in Kafka the write is asynchronous and not atomic with the state change: the record is
ARCHIVED (and its state persisted) whether or not its copy is written; a copy that cannot be
written is logged, not retried forever.  A broker crash between the two loses the copy.

The pure part (names, the DLQ batch) is here beside the writer task that appends it.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from enum import IntEnum

import trio

from databus.protocol.records import build_batch, decode_records_at, iter_headers
from databus.protocol.share_dlq import (  # noqa: F401  (re-exported: the broker's names)
    DLQ_COPY_CONFIG,
    DLQ_ENABLE_TOPIC_CONFIG,
    DLQ_TOPIC_CONFIG,
    HEADER_DELIVERY_COUNT,
    HEADER_GROUP,
    HEADER_MESSAGE,
    HEADER_OFFSET,
    HEADER_PARTITION,
    HEADER_TOPIC,
)

log = logging.getLogger(__name__)


# letters queued for writing past this are dropped with a warning (memory stays bounded
# while the DLQ topic cannot be written)
MAX_QUEUED_OFFSETS = 1_000_000
# an appended DLQ batch holds at most this many records and about this many key and value
# bytes (well under a topic's default max.message.bytes; a single bigger record goes alone)
MAX_RECORDS_PER_BATCH = 500
MAX_BYTES_PER_BATCH = 512 * 1024
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class DeadReason(IntEnum):
    """Why a record went to the dead-letter topic: Kafka's two causes."""

    REJECTED = 0
    DELIVERY_COUNT = 1

    @property
    def message(self) -> str:
        """The ``__dlq.errors.message`` header (Kafka's texts)."""
        if self is DeadReason.REJECTED:
            return "Offset rejected by client."
        return "Offset delivery count exceeded the threshold."


@dataclass(frozen=True)
class DeadLetter:
    """Offsets first..last of one share-partition, archived for one reason with one
    delivery count."""

    group_id: str
    topic: str
    partition: int
    first_offset: int
    last_offset: int
    delivery_count: int
    reason: DeadReason


def check_topic_name(name: str, prefix: str) -> None:
    """ValueError naming why ``name`` may not be a share group's DLQ topic ("" is none)."""
    if name == "":
        return
    if name.startswith("__"):
        raise ValueError(f"the DLQ topic name cannot start with __, topic: {name}")
    if not _LEGAL.match(name) or name in (".", ".."):
        raise ValueError(f"{name!r} is not a legal topic name")
    if prefix and not name.startswith(prefix):
        raise ValueError(f"the DLQ topic name does not comply with the DLQ topic prefix, "
                         f"topic: {name}, prefix: {prefix}")


def letter_headers(letter: DeadLetter, offset: int) -> tuple[tuple[str, bytes], ...]:
    return (
        (HEADER_TOPIC, letter.topic.encode()),
        (HEADER_PARTITION, str(letter.partition).encode()),
        (HEADER_OFFSET, str(offset).encode()),
        (HEADER_GROUP, letter.group_id.encode()),
        (HEADER_DELIVERY_COUNT, str(letter.delivery_count).encode()),
        (HEADER_MESSAGE, letter.reason.message.encode()),
    )


def dlq_records(letter: DeadLetter, originals: dict[int, tuple[bytes | None, bytes | None]],
                now_ms: int) -> list:
    """One record (build_batch's tuple) per offset of ``letter``: its headers, and the
    original (key, value) where ``originals`` has it (copy enabled and the record still in
    the log), else null ones."""
    return [(*originals.get(offset, (None, None)), letter_headers(letter, offset), now_ms)
            for offset in range(letter.first_offset, letter.last_offset + 1)]


def _chunks(records: list) -> list[list]:
    out: list[list] = [[]]
    size = 0
    for record in records:
        n = len(record[0] or b"") + len(record[1] or b"")
        if out[-1] and (len(out[-1]) >= MAX_RECORDS_PER_BATCH
                        or size + n > MAX_BYTES_PER_BATCH):
            out.append([])
            size = 0
        out[-1].append(record)
        size += n
    return out


def read_originals(plog, first: int, last: int) -> dict[int, tuple[bytes | None, bytes | None]]:
    """offset -> (key, value) of the records first..last still in ``plog``."""
    out: dict[int, tuple[bytes | None, bytes | None]] = {}
    offset = max(first, plog.log_start_offset)
    wanted = set(range(offset, last + 1))
    while offset <= last and offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        headers = list(iter_headers(data))
        if not headers:
            break
        for pos, h in headers:
            if h.is_control or h.last_offset < offset:
                continue
            _, records = decode_records_at(data, pos, wanted)
            for r in records:
                out[r.offset] = (r.key, r.value)
        offset = headers[-1][1].next_offset
    return out


class DeadLetterWriter:
    """Appends dead letters to their groups' DLQ topics, off the acknowledgement path.

    ``target(group_id)`` gives (DLQ topic, copy the record?) or None when the group has no
    DLQ any more (letters queued before the config was removed are dropped)."""

    def __init__(self, broker, target, *, prefix: str, auto_create: bool) -> None:
        self.broker = broker
        self.target = target
        self.prefix = prefix
        self.auto_create = auto_create
        self.queue: list[DeadLetter] = []
        self.queued_offsets = 0
        self.written = 0  # records appended to DLQ topics (tests, metrics)
        self.refused = 0  # records not written: bad topic, full queue
        self._wake = trio.Event()

    def offer(self, letters: list[DeadLetter]) -> None:
        for letter in letters:
            n = letter.last_offset - letter.first_offset + 1
            if self.queued_offsets + n > MAX_QUEUED_OFFSETS:
                self.refused += n
                log.warning("share group %s: dead-letter queue full, %s-%d offsets %d-%d "
                            "archived without a DLQ copy", letter.group_id, letter.topic,
                            letter.partition, letter.first_offset, letter.last_offset)
                continue
            self.queue.append(letter)
            self.queued_offsets += n
        if self.queue:
            self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            letters, self.queue, self.queued_offsets = self.queue, [], 0
            # one batch per DLQ topic-partition per round: a REJECT of every tenth record
            # makes one letter per record, and an append each would cost more than the rest
            batches: dict[tuple[str, int], list] = {}
            now = int(time.time() * 1000)
            for letter in letters:
                try:
                    place = self._place(letter)
                    if place is not None:
                        name, partition, copy = place
                        batches.setdefault((name, partition), []).extend(
                            dlq_records(letter, self._originals(letter) if copy else {}, now))
                except Exception as exc:  # noqa: BLE001 - one bad letter stops no other
                    self._refuse(letter, exc)
            for (name, partition), records in batches.items():
                for chunk in _chunks(records):
                    try:
                        self.broker.append(name, partition, build_batch(chunk))
                        self.written += len(chunk)
                    except Exception as exc:  # noqa: BLE001
                        self.refused += len(chunk)
                        log.warning("dead letters for %s-%d not written: %s", name, partition,
                                    exc)
            await trio.sleep(0)

    def _refuse(self, letter: DeadLetter, exc: Exception) -> None:
        self.refused += letter.last_offset - letter.first_offset + 1
        log.warning("share group %s: dead letters %s-%d offsets %d-%d not written: %s",
                    letter.group_id, letter.topic, letter.partition, letter.first_offset,
                    letter.last_offset, exc)

    def _place(self, letter: DeadLetter) -> tuple[str, int, bool] | None:
        """(DLQ topic, its partition, copy the records?) of a letter, the topic created if
        need be; None when the group has no DLQ any more; ValueError when it may not be
        written."""
        target = self.target(letter.group_id)
        if target is None:
            return None
        name, copy = target
        check_topic_name(name, self.prefix)
        info = self.broker.topic(name)
        if info is None:
            if not self.auto_create:
                raise ValueError(f"DLQ topic {name} does not exist and "
                                 "errors.deadletterqueue.auto.create.topics.enable is false")
            info = self.broker.create_topic(name, None, {DLQ_ENABLE_TOPIC_CONFIG: "true",
                                                         "message.timestamp.type": "CreateTime"})
        elif info.config.get(DLQ_ENABLE_TOPIC_CONFIG, "false").lower() != "true":
            raise ValueError(f"DLQ is not enabled on topic {name} "
                             f"({DLQ_ENABLE_TOPIC_CONFIG} is not true)")
        return name, letter.partition % info.partitions, copy

    def _originals(self, letter: DeadLetter) -> dict[int, tuple[bytes | None, bytes | None]]:
        plog = self.broker.get_log(letter.topic, letter.partition)
        if plog is None:
            return {}
        return read_originals(plog, letter.first_offset, letter.last_offset)
