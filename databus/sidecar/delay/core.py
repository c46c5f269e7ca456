"""Delayed messages, the pure part: where a delayed message is stored, when it moves on, what
may be committed.  No I/O; the trio shell is delay.py.

Storage is a timing wheel made of topics (time buckets): level ``i`` is the topic
``databus-delay-<span>`` with span ``D_i = 250 ms * 2**i`` (i = 0..LEVELS-1: 250 ms .. about
36 hours).  The wheel runs ``LEAD_MS`` (1 s) ahead of the due times: a message with ``r`` ms
to go is written to the highest level whose span is at most ``r - LEAD_MS``, so
``D_i <= r - LEAD_MS < 2 * D_i`` (or anything above the top span, in the top level).
Every record of level ``i`` is *ready* ``D_i`` after it was written (its record timestamp):
records are written in time order, so a partition's records become ready in offset order and
only the head of each partition needs watching — one deadline per partition, never one
timer per message.  A ready record has ``LEAD_MS <= r' < D_i + LEAD_MS`` to go and is
written down to a lower level, until less than ``LEAD_MS + FINAL_WINDOW_MS`` (3 s) remains:
then it waits in memory (``Scheduler.final``: only messages due within 3 s, so memory
follows the delivery rate, not the number pending) and is delivered to its topic at its
time.  A message thus passes each level at most once (the top level once per 36 h); the
window saves the hops through the three lowest levels, which are only used for messages
sent with less than 3 s to go.  The lead is the service's allowance for its own lag: a
step taken up to ``LEAD_MS`` late still puts the message in memory before its time (without
it a record could be ready with 0 ms to go, and any lag made it late).

Committed offsets never pass a record that is not yet written elsewhere (forwarded down or
delivered): ``Scheduler.safe_offsets`` is the lowest offset still held per partition.  A
crash therefore re-reads and re-forwards (at least once; docs/delayed.md).

The headers of a stored delayed record (the app's own headers follow them):

    databus-deliver-at      due time, ms since the epoch, ASCII digits
    databus-delay-id        the message's id (cancel by it)
    databus-delay-target    the topic to deliver to
    databus-delay-partition the partition asked for (only when the app named one)

The delivered message carries the app's headers after ``databus-deliver-at``.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from databus.protocol.sidecar_wire import (
    DELAY_DUE_HEADER,
    DELAY_ID_HEADER,
    DELAY_PARTITION_HEADER,
    DELAY_TARGET_HEADER,
)
from databus.protocol.types import TopicPartition

BASE_MS = 250
LEVELS = 20
FINAL_WINDOW_MS = 2000
# The wheel runs this far ahead of the due times: a record becomes ready with at least
# LEAD_MS to go (not anything from 0 up), so the service's own lag at a step (a burst of
# ready records, a fetch behind, a busy machine) is spent before the due time, not after.
LEAD_MS = 1000
TOPIC_PREFIX = "databus-delay-"
CANCEL_TOPIC = "databus-delay-cancel"
OUR_HEADERS = frozenset({DELAY_DUE_HEADER, DELAY_ID_HEADER, DELAY_TARGET_HEADER,
                         DELAY_PARTITION_HEADER})


def span_ms(level: int) -> int:
    return BASE_MS << level


def _span_name(ms: int) -> str:
    if ms % 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    return f"{seconds}s"


LEVEL_TOPICS = tuple(TOPIC_PREFIX + _span_name(span_ms(i)) for i in range(LEVELS))
_LEVEL_OF = {topic: i for i, topic in enumerate(LEVEL_TOPICS)}


def level_of_topic(topic: str) -> int | None:
    return _LEVEL_OF.get(topic)


def level_for(remaining_ms: int) -> int | None:
    """The level for a message ``remaining_ms`` from due: the one whose span ``D`` has
    ``D <= remaining_ms - LEAD_MS < 2 * D``; None below the lowest span (it waits in
    memory)."""
    ahead = remaining_ms - LEAD_MS
    if ahead < BASE_MS:
        return None
    return min((ahead // BASE_MS).bit_length() - 1, LEVELS - 1)


class DelayHeaderError(ValueError):
    """A delay header that cannot be used (named in the message)."""


def parse_due(raw: bytes | str | None) -> int:
    try:
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        due = int(text)
    except (UnicodeDecodeError, ValueError):
        raise DelayHeaderError(
            f"{DELAY_DUE_HEADER} must be a time in ms since the epoch, not {raw!r}") from None
    if due < 0:
        raise DelayHeaderError(f"{DELAY_DUE_HEADER} must not be negative ({due})")
    return due


@dataclass(frozen=True)
class Delayed:
    """A delayed message as stored: where it goes, when, its id, and the app's message."""

    target: str
    due_ms: int
    delay_id: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple  # the app's own

    def stored_headers(self) -> list[tuple[str, bytes]]:
        ours = [(DELAY_DUE_HEADER, str(self.due_ms).encode()),
                (DELAY_ID_HEADER, self.delay_id.encode()),
                (DELAY_TARGET_HEADER, self.target.encode())]
        if self.partition is not None:
            ours.append((DELAY_PARTITION_HEADER, str(self.partition).encode()))
        return ours + list(self.headers)

    def delivered_headers(self) -> list[tuple[str, bytes]]:
        """The delivered message keeps its due time (consumers can see how late it came)."""
        return [(DELAY_DUE_HEADER, str(self.due_ms).encode())] + list(self.headers)


def parse_stored(key, value, headers) -> Delayed:
    """The Delayed of a record read from a level topic (DelayHeaderError if it is not one)."""
    ours: dict[str, bytes] = {}
    rest = []
    for name, data in headers or ():
        if name in OUR_HEADERS and name not in ours:
            ours[name] = data or b""
        else:
            rest.append((name, data))
    if DELAY_TARGET_HEADER not in ours:
        raise DelayHeaderError(f"record without {DELAY_TARGET_HEADER}")
    partition = ours.get(DELAY_PARTITION_HEADER)
    return Delayed(
        target=ours[DELAY_TARGET_HEADER].decode(errors="replace"),
        due_ms=parse_due(ours.get(DELAY_DUE_HEADER)),
        delay_id=ours.get(DELAY_ID_HEADER, b"").decode(errors="replace"),
        partition=int(partition) if partition else None,
        key=key, value=value, headers=tuple(rest),
    )


# -- the schedule of one delay-service member --------------------------------------------------



@dataclass
class _Held:
    """Records of one assigned level partition, fetched and not yet handed on."""

    level: int
    records: deque = field(default_factory=deque)  # (offset, timestamp, record) in order
    in_final: dict = field(default_factory=dict)  # offset -> due, held in Scheduler.final
    next_offset: int | None = None  # one past the last record handed in


@dataclass(frozen=True)
class Action:
    """What to do with a ready record: ``level`` None = deliver ``delayed`` now."""

    tp: TopicPartition
    offset: int
    delayed: Delayed | None  # None: not a delayed record (skipped, logged by the shell)
    level: int | None
    error: str | None = None


class Scheduler:
    """The records this member holds, per assigned partition, and the in-memory final wait."""

    def __init__(self, max_held_per_partition: int = 1000) -> None:
        self.partitions: dict[TopicPartition, _Held] = {}
        self.final: list[tuple[int, TopicPartition, int, Delayed]] = []  # heap by due
        self.max_held = max_held_per_partition

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            level = level_of_topic(tp[0])
            if level is not None and tp not in self.partitions:
                self.partitions[tp] = _Held(level)

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        gone = set(tps)
        for tp in gone:
            self.partitions.pop(tp, None)
        if gone:
            self.final = [item for item in self.final if item[1] not in gone]
            heapq.heapify(self.final)

    def add(self, tp: TopicPartition, records) -> None:
        """Records fetched from ``tp`` (offset order): each has offset, timestamp, key,
        value, headers."""
        held = self.partitions.get(tp)
        if held is None:
            return
        for record in records:
            held.records.append(record)
            held.next_offset = record.offset + 1

    def full(self, tp: TopicPartition) -> bool:
        """Pause fetching ``tp``: enough of it is held."""
        held = self.partitions.get(tp)
        return held is not None and len(held.records) >= self.max_held

    def next_deadline(self) -> int | None:
        """When the next record becomes ready (ms), None when nothing is held."""
        times = [span_ms(h.level) + h.records[0].timestamp
                 for h in self.partitions.values() if h.records]
        if self.final:
            times.append(self.final[0][0])
        return min(times) if times else None

    def take_ready(self, now_ms: int, cancelled) -> list[Action]:
        """Every record ready at ``now_ms``: forward (level) or deliver; cancelled ones are
        dropped (an Action with neither, marked done at once).  Deliveries come first: a
        forwarded record still has at least ``LEAD_MS`` to go, a delivery is due now, and
        after a handover one step may forward thousands of records read again (the dead
        member's uncommitted ones) while the messages due in the meantime wait."""
        actions: list[Action] = []
        for tp, held in self.partitions.items():
            span = span_ms(held.level)
            records = held.records
            while records and records[0].timestamp + span <= now_ms:
                record = records.popleft()
                try:
                    delayed = parse_stored(record.key, record.value, record.headers)
                except DelayHeaderError as exc:
                    actions.append(Action(tp, record.offset, None, None, str(exc)))
                    continue
                if delayed.delay_id and delayed.delay_id in cancelled:
                    actions.append(Action(tp, record.offset, None, None))
                    continue
                remaining = delayed.due_ms - now_ms
                level = (None if remaining < LEAD_MS + FINAL_WINDOW_MS
                         else level_for(remaining))
                if level is None:
                    held.in_final[record.offset] = delayed.due_ms
                    heapq.heappush(self.final, (delayed.due_ms, tp, record.offset, delayed))
                else:
                    actions.append(Action(tp, record.offset, delayed, level))
        due: list[Action] = []
        while self.final and self.final[0][0] <= now_ms:
            _due, tp, offset, delayed = heapq.heappop(self.final)
            held = self.partitions.get(tp)
            if held is not None:
                held.in_final.pop(offset, None)
            if delayed.delay_id and delayed.delay_id in cancelled:
                due.append(Action(tp, offset, None, None))
            else:
                due.append(Action(tp, offset, delayed, None))
        return due + actions

    def safe_offsets(self, unfinished: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition, the offset a commit may name: below every record still held here
        (in its queue or the final wait) and every ``unfinished`` (sent, not acknowledged,
        the lowest offset per partition)."""
        out = {}
        for tp, held in self.partitions.items():
            lows = []
            if held.records:
                lows.append(held.records[0].offset)
            if held.in_final:
                lows.append(min(held.in_final))
            if tp in unfinished:
                lows.append(unfinished[tp])
            if lows:
                out[tp] = min(lows)
            elif held.next_offset is not None:
                out[tp] = held.next_offset
        return out
