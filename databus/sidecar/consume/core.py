"""The consuming side of the sidecar, sans I/O: this module owns one group member's state.

A ``MemberCore`` sits between a delivery source (our Kafka consumer, reading the stream's
topic and the group's retry topic) and the apps subscribed through the socket.  It is fed
records (``add``), fetches (``fetch``), acks and nacks, and the clock (``tick``); it answers
with messages for apps (``serve``), copies to make (retry or dead-letter records, ``Copy``),
and offsets that are safe to commit (``committable``).  No sockets, no trio: consume.py is
the shell, the tests drive this with plain calls and a fake clock.

Bookkeeping, and why:

- **Progress per partition read** (``Progress``): every offset read stays outstanding until
  it is done: acked, filtered out by tag, or copied to the retry/DLQ topic with the copy
  acknowledged by the cluster.  The committable offset is the lowest outstanding one, so a
  crash redelivers what was in flight and never skips it (at least once).
- **Ready queues**: with ``ordering: partition`` each source partition has its own queue and
  an owner (one subscriber at a time), so one app sees a partition's messages in order;
  partitions are shared out fairly among subscribers and move only when idle at their owner
  (no message of theirs in flight) or when the owner leaves.  Redelivered retries have no
  order left to keep and go to whoever asks (``ready_any``), as does everything with
  ``ordering: none``.
- **Delayed retries**: records read from the retry topic before their due time wait in a heap.
- **In flight**: handed to a subscriber under a delivery id, with a deadline
  (``ack.timeout.ms``); an expired one counts as a nack.  When a subscriber leaves, its
  in-flight messages go back to the front of their queues for another one.
- **Queue mode on a share group** (``share=True``; ``ordering: none`` where the cluster
  serves KIP-932): the broker keeps the state of each record of the stream's topic instead
  of an offset.  Records come with their delivery count (the attempt); an ack becomes
  ACCEPT and the last attempt a copy to the DLQ followed by REJECT -- or, where the
  cluster keeps share groups' dead letters itself (KIP-1191, ``broker_dlq``), a plain
  REJECT: the broker writes the copy, with Kafka's ``__dlq.errors.*`` headers, to the
  group's DLQ topic.  (A last attempt read from the retry topic is not the share group's
  to REJECT: it is still copied here, to the same topic, with the same headers.)  A nack
  waits its retry
  level as in classic mode, in one of two ways.  If the level ends before the record's
  acquisition lock (``lock_ms`` from when it was read, less ``LOCK_MARGIN``) the record
  stays acquired in ``held`` and is RELEASEd when due: were the sidecar killed meanwhile,
  the broker would hand it out again when the lock runs out, which is after the due time,
  so nothing is lost and nothing comes early.  A longer level cannot be held (the broker
  would take the record back early, raising its delivery count): it is copied to the retry
  topic as in classic mode and ACCEPTed once the cluster has the copy (a kill in between
  delivers it twice, never zero times).  The retry topic is read by a classic consumer
  (offsets, ``Progress``), so its records wait in memory for as long as they need.
  Settlements queue in ``settled`` for the shell to hand to the share consumer.
- **Long polls**: a fetch waits until ``min_bytes`` of messages are ready for its subscriber
  or its ``max_wait_ms`` passed (Kafka's fetch.min.bytes / fetch.max.wait.ms); a subscriber
  is never handed more than its window (``max_in_flight``) minus what it holds.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable, Iterable
from itertools import chain, groupby, repeat
from operator import attrgetter
from typing import Any, NamedTuple

from databus.config_base import parse_duration_ms
from databus.protocol import share_dlq
from databus.protocol.sidecar_wire import TAG_HEADER
from databus.sidecar.config import DEFAULT_RETRY_LEVELS

# Headers on retry and dead-letter copies (ASCII values, readable by any Kafka tool).
H_ATTEMPT = "databus-attempt"  # the attempt the copy will be delivered as (retry), or was (DLQ)
H_DUE = "databus-due"  # ms since the epoch when the retry is due
H_TOPIC = "databus-origin-topic"
H_PARTITION = "databus-origin-partition"
H_OFFSET = "databus-origin-offset"
H_REASON = "databus-reason"
H_GROUP = "databus-group"
INTERNAL_HEADERS = frozenset({H_ATTEMPT, H_DUE, H_TOPIC, H_PARTITION, H_OFFSET, H_REASON, H_GROUP})

# Share-group settlements (KIP-932's AcknowledgeType values).
ACCEPT, RELEASE, REJECT = 1, 2, 3
# A record's lock is timed from when the sidecar read it, which is a little after the
# broker acquired it: a retry is held only if it falls due this much before that estimate
# runs out (a tenth of the lock, at least LOCK_MARGIN_MS).
LOCK_MARGIN_MS = 500

_SOURCE = attrgetter("topic", "partition")
_OFFSET = attrgetter("offset")
_ENTRY_SOURCE = attrgetter("source")

def retry_delay_ms(failed_attempt: int, levels_ms: tuple[int, ...]) -> int:
    """How long after its ``failed_attempt``-th delivery (1: the first) a message is retried."""
    return levels_ms[min(max(failed_attempt, 1), len(levels_ms)) - 1]


def header(headers: Iterable[tuple[str, bytes | None]], name: str) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


class Progress:
    """Offsets read from one partition and not yet done; ``committable`` is the lowest of
    them (or the one after the last read when none is outstanding)."""

    __slots__ = ("outstanding", "done", "next")

    def __init__(self) -> None:
        self.outstanding: deque[int] = deque()
        self.done: set[int] = set()
        self.next: int | None = None

    def add(self, offset: int) -> None:
        self.outstanding.append(offset)
        self.next = offset + 1

    def finish(self, offset: int) -> None:
        self.finish_many((offset,))

    def finish_many(self, offsets: Iterable[int]) -> None:
        out = self.outstanding
        done = self.done
        for offset in offsets:
            if out and out[0] == offset:  # the usual case: acked in order
                out.popleft()
                while out and out[0] in done:
                    done.remove(out.popleft())
            else:
                done.add(offset)

    def committable(self) -> int | None:
        return self.outstanding[0] if self.outstanding else self.next


class Entry:
    """One message between being read and being done.  ``source``/``offset`` say where it
    was read (the stream's topic or the retry topic: what progress tracks); ``rec`` is the
    record as the app sees it (for a retry: the original's partition and offset, the app's
    own headers).  Made once per message read, so it stores little and reads ``rec``
    lazily."""

    __slots__ = ("source", "offset", "rec", "attempt", "size", "due", "delivery_id", "lock")

    def __init__(self, source: tuple[str, int], offset: int, rec: Any, attempt: int,
                 due: int = 0) -> None:
        self.source = source
        self.offset = offset
        self.rec = rec
        self.attempt = attempt
        value, key = rec.value, rec.key
        self.size = (len(value) if value else 0) + (len(key) if key else 0)
        self.due = due
        self.delivery_id = 0
        # share mode: wall ms until which the record is surely still acquired by this
        # member (0: not acquired, or the lock unknown)
        self.lock = 0

    partition = property(lambda self: self.rec.partition)
    origin_offset = property(lambda self: self.rec.offset)
    timestamp = property(lambda self: self.rec.timestamp)
    value = property(lambda self: self.rec.value)
    key = property(lambda self: self.rec.key)
    headers = property(lambda self: self.rec.headers)

    def wire(self) -> list[Any]:
        """The consumed-message array for the socket (sidecar_wire.consumed_array's shape;
        a frame of them is packed by sidecar_wire.encode_messages without this list)."""
        r = self.rec
        fields = [self.delivery_id, r.partition, r.offset, r.timestamp, self.attempt, r.value]
        if r.headers:
            fields += [r.key, [list(h) for h in r.headers]]
        elif r.key is not None:
            fields.append(r.key)
        return fields


class Copy(NamedTuple):
    """A copy to write: to the retry topic (``dead`` False, due at ``due_ms``, delivered then
    as attempt ``entry.attempt + 1``) or to the dead-letter topic.  When the cluster has it,
    ``MemberCore.copied(entry)`` marks the original done; if writing fails,
    ``copy_failed(entry)`` delivers the original again."""

    entry: Entry
    dead: bool
    due_ms: int
    reason: str

    def headers(self, topic: str, group: str,
                kip1191: bool = False) -> list[tuple[str, bytes]]:
        """The copy's headers: the app's own, then where it came from and why (a dead letter
        ``kip1191``: also as the broker's own dead letters say it, KIP-1191's headers)."""
        e = self.entry
        own = [(k, v) for k, v in e.headers if k not in INTERNAL_HEADERS]
        attempt = e.attempt if self.dead else e.attempt + 1
        meta = [
            (H_ATTEMPT, str(attempt).encode()),
            (H_TOPIC, topic.encode()),
            (H_PARTITION, str(e.partition).encode()),
            (H_OFFSET, str(e.origin_offset).encode()),
            (H_REASON, self.reason.encode()),
            (H_GROUP, group.encode()),
        ]
        if not self.dead:
            meta.append((H_DUE, str(self.due_ms).encode()))
        elif kip1191:
            meta += [
                (share_dlq.HEADER_TOPIC, topic.encode()),
                (share_dlq.HEADER_PARTITION, str(e.partition).encode()),
                (share_dlq.HEADER_OFFSET, str(e.origin_offset).encode()),
                (share_dlq.HEADER_GROUP, group.encode()),
                (share_dlq.HEADER_DELIVERY_COUNT, str(e.attempt).encode()),
                (share_dlq.HEADER_MESSAGE, self.reason.encode()),
            ]
        return own + meta


class Subscriber:
    __slots__ = ("key", "window", "inflight", "next_id", "fetch", "owned")

    def __init__(self, key: Hashable, window: int) -> None:
        self.key = key
        self.window = window
        self.inflight: dict[int, Entry] = {}
        self.next_id = 0
        # the waiting long poll: (max_messages, min_bytes, deadline) or None
        self.fetch: tuple[int, int, float] | None = None
        self.owned = 0  # partitions this subscriber owns (ordering: partition)


class MemberCore:
    """See the module docstring.  Times: ``now`` is monotonic seconds (deadlines),
    ``wall_ms`` the epoch clock in ms (due times travel in headers between sidecars)."""

    def __init__(
        self,
        topic: str,
        retry_topic: str,
        *,
        ordering: str = "partition",
        tags: tuple[str, ...] | None = None,
        max_attempts: int = 16,
        retry_levels_ms: tuple[int, ...] = tuple(map(parse_duration_ms, DEFAULT_RETRY_LEVELS)),
        ack_timeout_ms: int = 30_000,
        share: bool = False,
        broker_dlq: bool = False,
    ) -> None:
        self.topic = topic
        self.share = share
        # share mode on a KIP-1191 cluster: a spent record is REJECTed, the broker copies it
        self.broker_dlq = share and broker_dlq
        self.rejected = 0  # spent records REJECTed to the broker's DLQ (broker_dlq)
        # share mode: (entry, ACCEPT | RELEASE | REJECT) for the shell to acknowledge
        self.settled: list[tuple[Entry, int]] = []
        # share mode: nacked records kept acquired until due, (due_ms, seq, entry) heap
        self.held: list[tuple[int, int, Entry]] = []
        # share mode: the share group's acquisition lock (ms; None until the broker said)
        self.lock_ms: int | None = None
        self.retry_topic = retry_topic
        self.ordered = ordering == "partition" and not share
        self.tags = frozenset(tags) if tags else None
        self.max_attempts = max_attempts
        self.retry_levels_ms = retry_levels_ms
        self.ack_timeout = ack_timeout_ms / 1000
        self.progress: dict[tuple[str, int], Progress] = {}
        self.ready: dict[int, deque[Entry]] = {}  # by stream partition (ordering: partition)
        self.ready_any: deque[Entry] = deque()
        self.owner: dict[int, Subscriber] = {}
        self.owner_inflight: dict[int, int] = {}
        self.delayed: list[tuple[int, int, Entry]] = []  # (due_ms, seq, entry) heap
        self._seq = 0
        self.pending = 0  # entries in ready queues and the delayed heap
        self.pending_bytes = 0
        self.subscribers: dict[Hashable, Subscriber] = {}
        self._deadlines: deque[tuple[float, Subscriber, int]] = deque()
        self._committed: dict[tuple[str, int], int] = {}
        self.filtered = 0  # messages skipped by the tag filter
        self.delivered = 0  # handed to apps (redeliveries included)
        self.acked = 0
        self.nacked = 0  # nacks and ack timeouts

    # --- records in ------------------------------------------------------------------------

    def add(self, records: Iterable[Any], wall_ms: int) -> None:
        """Take records (ConsumerRecord-like: topic, partition, offset, timestamp, key,
        value, headers) read from the stream's topic or the retry topic."""
        if self.share:
            records = self._add_shared(records, wall_ms)
        elif self.tags is None:
            records = self._add_plain(records)
        tags = self.tags
        progress = self.progress
        for r in records:
            source = (r.topic, r.partition)
            prog = progress.get(source)
            if prog is None:
                prog = progress[source] = Progress()
            prog.add(r.offset)
            headers = r.headers
            if tags is not None:
                tag = header(headers, TAG_HEADER) if headers else None
                if tag is None or tag.decode(errors="replace") not in tags:
                    prog.finish(r.offset)  # not for this group: skipped, never sent
                    self.filtered += 1
                    continue
            if r.topic == self.retry_topic:
                entry = self._retry_entry(r, source)
                if entry is None:
                    prog.finish(r.offset)
                    continue
                if entry.due > wall_ms:
                    self._seq += 1
                    heapq.heappush(self.delayed, (entry.due, self._seq, entry))
                    self.pending += 1
                    self.pending_bytes += entry.size
                    continue
                self._ready(entry, front=False, any_=True)
                continue
            entry = Entry(source, r.offset, r, 1)
            self._ready(entry, front=False, any_=not self.ordered)

    def _add_plain(self, records: Iterable[Any]) -> list[Any]:
        """The hot path of ``add``: runs of the stream topic's records of one partition,
        taken a run at a time; returns the records left for the general path (retries)."""
        rest: list[Any] = []
        topic = self.topic
        # (grouped in C: a poll's records come a partition at a time)
        for (source_topic, _), group in groupby(records, _SOURCE):
            if source_topic != topic:
                rest.extend(group)
            else:
                self._add_run(list(group))
        return rest

    def _add_run(self, run: list[Any]) -> None:
        first = run[0]
        source = (first.topic, first.partition)
        prog = self.progress.get(source)
        if prog is None:
            prog = self.progress[source] = Progress()
        prog.outstanding.extend(map(_OFFSET, run))
        prog.next = run[-1].offset + 1
        entries = [Entry(source, r.offset, r, 1) for r in run]
        if self.ordered:
            queue = self.ready.get(first.partition)
            if queue is None:
                queue = self.ready[first.partition] = deque()
        else:
            queue = self.ready_any
        queue.extend(entries)
        self.pending += len(entries)
        self.pending_bytes += sum([e.size for e in entries])

    def _add_shared(self, records: Iterable[Any], wall_ms: int) -> list[Any]:
        """Records of the stream's topic acquired from the share group; returns the others
        (the retry topic's, read by offset as in classic mode)."""
        tags = self.tags
        rest = []
        lock = 0
        if self.lock_ms:
            lock = wall_ms + self.lock_ms - max(LOCK_MARGIN_MS, self.lock_ms // 10)
        for r in records:
            if r.topic != self.topic:
                rest.append(r)
                continue
            entry = Entry((r.topic, r.partition), r.offset, r, r.delivery_count or 1)
            entry.lock = lock
            if tags is not None:
                tag = header(r.headers, TAG_HEADER) if r.headers else None
                if tag is None or tag.decode(errors="replace") not in tags:
                    self.settled.append((entry, ACCEPT))  # not for this group: done with it
                    self.filtered += 1
                    continue
            self._ready(entry, front=False, any_=True)
        return rest

    def _retry_entry(self, r: Any, source: tuple[str, int]) -> Entry | None:
        meta = {k: v for k, v in r.headers if k in INTERNAL_HEADERS}
        try:
            if meta.get(H_TOPIC, b"").decode() != self.topic:
                return None  # another stream's retry (the group consumed it once): not ours
            attempt = int(meta[H_ATTEMPT])
            partition = int(meta[H_PARTITION])
            offset = int(meta[H_OFFSET])
            due = int(meta.get(H_DUE) or 0)
        except (KeyError, ValueError):
            return None  # not written by a sidecar: nothing to deliver it as
        own = tuple(h for h in r.headers if h[0] not in INTERNAL_HEADERS)
        return Entry(source, r.offset, r._replace(partition=partition, offset=offset,
                                                  headers=own), attempt, due)

    def _ready(self, entry: Entry, front: bool, any_: bool) -> None:
        if any_:
            queue = self.ready_any
        else:
            queue = self.ready.get(entry.partition)
            if queue is None:
                queue = self.ready[entry.partition] = deque()
        if front:
            queue.appendleft(entry)
        else:
            queue.append(entry)
        self.pending += 1
        self.pending_bytes += entry.size

    # --- subscribers -----------------------------------------------------------------------

    def subscribe(self, key: Hashable, window: int) -> None:
        self.subscribers[key] = Subscriber(key, window)

    def unsubscribe(self, key: Hashable) -> int:
        """The subscriber left (or its app's connection closed): what it held goes back to
        the front of the queues for the others.  Returns how many messages that was."""
        sub = self.subscribers.pop(key, None)
        if sub is None:
            return 0
        entries = sorted(sub.inflight.values(), key=lambda e: e.delivery_id, reverse=True)
        for entry in entries:
            self._unown(entry)
            self._ready(entry, front=True, any_=not self.ordered or entry.source[0] != self.topic)
        for partition, owner in list(self.owner.items()):
            if owner is sub:
                del self.owner[partition]
        return len(entries)

    def fetch(self, key: Hashable, max_messages: int, min_bytes: int, max_wait_ms: int,
              now: float) -> None:
        """A long poll: answered by ``serve`` (at once if messages are ready)."""
        sub = self.subscribers[key]
        sub.fetch = (max_messages, min_bytes, now + max_wait_ms / 1000)

    def serve(self, now: float, wall_ms: int) -> list[tuple[Hashable, list[Entry]]]:
        """Answer the long polls that can be answered: (subscriber key, entries) pairs, an
        empty list for a poll whose wait is over with nothing for it."""
        self._promote(wall_ms)
        out = []
        for sub in list(self.subscribers.values()):
            if sub.fetch is None:
                continue
            max_messages, min_bytes, deadline = sub.fetch
            room = min(max_messages, sub.window - len(sub.inflight))
            entries = self._take(sub, room, now) if room > 0 and self.pending else []
            if entries and min_bytes > 1 and deadline > now:
                if sum(e.size for e in entries) < min_bytes:
                    self._give_back(sub, entries)
                    continue
            if entries or deadline <= now:
                sub.fetch = None
                out.append((sub.key, entries))
        return out

    def _take(self, sub: Subscriber, room: int, now: float) -> list[Entry]:
        taken: list[Entry] = []
        any_ = self.ready_any
        if any_:
            if len(any_) <= room:
                taken.extend(any_)
                any_.clear()
            else:
                popleft = any_.popleft
                taken.extend([popleft() for _ in range(room)])
        if self.ordered and len(taken) < room and self.ready:
            self._take_partitions(sub, room, taken)
        if not taken:
            return taken
        deadline = now + self.ack_timeout
        inflight = sub.inflight
        deadlines = self._deadlines
        size = 0
        next_id = sub.next_id
        for entry in taken:
            next_id += 1
            entry.delivery_id = next_id
            inflight[next_id] = entry
            size += entry.size
        sub.next_id = next_id
        deadlines.append((deadline, sub, next_id))
        self.delivered += len(taken)
        self.pending -= len(taken)
        self.pending_bytes -= size
        return taken

    def _take_partitions(self, sub: Subscriber, room: int, taken: list[Entry]) -> None:
        share = math.ceil(len(self.ready) / max(len(self.subscribers), 1))
        owner = self.owner
        owner_inflight = self.owner_inflight
        for partition, queue in self.ready.items():
            if len(taken) >= room:
                break
            current = owner.get(partition)
            if current is not sub:
                # Claim a free partition, or an idle one whose owner has more than its share
                # (a subscriber that joined later gets its share as partitions go idle).
                if sub.owned >= share or (
                    current is not None
                    and (owner_inflight.get(partition) or current.owned <= share)
                ):
                    continue
                if not queue:
                    continue
                if current is not None:
                    current.owned -= 1
                owner[partition] = sub
                sub.owned += 1
            n = min(len(queue), room - len(taken))
            if n == len(queue):  # (whole queues at a time: no Python step per message)
                taken.extend(queue)
                queue.clear()
            elif n:
                popleft = queue.popleft
                taken.extend([popleft() for _ in range(n)])
            if n:
                owner_inflight[partition] = owner_inflight.get(partition, 0) + n

    def _give_back(self, sub: Subscriber, entries: list[Entry]) -> None:
        for entry in reversed(entries):
            del sub.inflight[entry.delivery_id]
            self._unown(entry)
            self._ready(entry, front=True, any_=not self.ordered or entry.source[0] != self.topic)

    def _unown(self, entry: Entry) -> None:
        if self.ordered and entry.source[0] == self.topic:
            left = self.owner_inflight.get(entry.partition, 0) - 1
            self.owner_inflight[entry.partition] = max(left, 0)

    # --- acks and nacks --------------------------------------------------------------------

    def ack(self, key: Hashable, ids: Iterable[int],
            ranges: Iterable[tuple[int, int]] | None = None) -> int:
        """Acked messages are done: ``ids``, and every id of each inclusive (first, last)
        of ``ranges`` (an app acking in order).  Unknown ids (already redelivered
        elsewhere, revoked) are ignored: the message may be delivered again, never lost.
        Returns how many were acked."""
        sub = self.subscribers.get(key)
        if sub is None:
            return 0
        if ranges:
            # Ids above the last one handed out name nothing: clipped, so that a range of
            # 2**63 ids costs no more than the ids this subscriber was given.
            top = sub.next_id
            spans = [range(max(first, 1), min(last, top) + 1) for first, last in ranges]
            ids = chain(ids, *spans)
        pop = sub.inflight.pop
        entries = [e for e in map(pop, ids, repeat(None)) if e is not None]
        acked = len(entries)
        if self.share:
            # the stream's records are the share group's; retries were read by offset
            topic = self.topic
            self.settled += [(e, ACCEPT) for e in entries if e.source[0] == topic]
            entries = [e for e in entries if e.source[0] != topic]
        if entries:
            topic = self.topic
            owned: dict[int, int] = {}
            done: dict[tuple[str, int], list[int]] = {}
            # (runs of one source at a time, grouped and read in C: acks come in order)
            for source, run in groupby(entries, _ENTRY_SOURCE):
                offsets = list(map(_OFFSET, run))
                known = done.get(source)
                if known is None:
                    done[source] = offsets
                else:
                    known += offsets
                if source[0] == topic:  # (the stream's partition is where it was read)
                    owned[source[1]] = owned.get(source[1], 0) + len(offsets)
            for source, offsets in done.items():
                prog = self.progress.get(source)
                if prog is not None:  # else revoked meanwhile: the new owner reads it again
                    prog.finish_many(offsets)
            if self.ordered:
                owner_inflight = self.owner_inflight
                for partition, n in owned.items():
                    owner_inflight[partition] = max(owner_inflight.get(partition, 0) - n, 0)
        self.acked += acked
        return acked

    def nack(self, key: Hashable, items: Iterable[tuple[int, int | None, str | None]],
             wall_ms: int) -> list[Copy]:
        """Nacked messages become copies to write: to the retry topic, due after ``delay_ms``
        (None: the retry level of this attempt), or to the DLQ after ``max.attempts``."""
        sub = self.subscribers.get(key)
        if sub is None:
            return []
        copies = []
        for id_, delay_ms, reason in items:
            entry = sub.inflight.pop(id_, None)
            if entry is not None:
                self._unown(entry)
                copy = self._fail(entry, delay_ms, reason or "nacked", wall_ms)
                if copy is not None:
                    copies.append(copy)
        return copies

    def _fail(self, entry: Entry, delay_ms: int | None, reason: str,
              wall_ms: int) -> Copy | None:
        self.nacked += 1
        if entry.attempt >= self.max_attempts:
            if self.broker_dlq and self._shared(entry):
                self.settled.append((entry, REJECT))  # the broker writes the dead letter
                self.rejected += 1
                return None
            return Copy(entry, True, 0, reason)
        if delay_ms is None:
            delay_ms = retry_delay_ms(entry.attempt, self.retry_levels_ms)
        due = wall_ms + delay_ms
        if self._shared(entry):
            if delay_ms <= 0:
                self.settled.append((entry, RELEASE))  # the broker hands it out at once
                return None
            if due <= entry.lock:
                # Due before its lock runs out: keep it acquired, RELEASE it then (see the
                # module docstring for why a kill -9 meanwhile loses nothing).
                self._seq += 1
                heapq.heappush(self.held, (due, self._seq, entry))
                return None
        return Copy(entry, False, due, reason)

    def _shared(self, entry: Entry) -> bool:
        """Whether ``entry`` is a record the share group handed out (else read by offset)."""
        return self.share and entry.source[0] == self.topic

    def copied(self, entry: Entry, dead: bool = False) -> None:
        """The retry or DLQ (``dead``) copy of ``entry`` is in the cluster: the original is
        done (a share record: ACCEPTed after a retry copy, REJECTed after a dead letter)."""
        if self._shared(entry):
            self.settled.append((entry, REJECT if dead else ACCEPT))
        else:
            self._finish(entry)

    def copy_failed(self, entry: Entry) -> None:
        """Writing the copy failed: deliver the original again (same attempt)."""
        if self._shared(entry):
            self.settled.append((entry, RELEASE))
        elif self.progress.get(entry.source) is not None:
            self._ready(entry, front=True, any_=True)

    def take_settled(self) -> list[tuple[Entry, int]]:
        """Share mode: the settlements to acknowledge to the broker, oldest first."""
        settled, self.settled = self.settled, []
        return settled

    def take_held(self) -> list[Copy]:
        """Share mode, the member stopping: the held records as retry copies (closing the
        share consumer would release them at once, before their due time)."""
        held, self.held = self.held, []
        return [Copy(entry, False, due, "held when the sidecar stopped")
                for due, _, entry in sorted(held)]

    def _finish(self, entry: Entry) -> None:
        prog = self.progress.get(entry.source)
        if prog is not None:  # else revoked meanwhile: the new owner reads it again
            prog.finish(entry.offset)

    # --- time ------------------------------------------------------------------------------

    def tick(self, now: float, wall_ms: int) -> list[Copy]:
        """Messages in flight past ``ack.timeout.ms`` are failed (as nacks): their copies."""
        copies = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, sub, last_id = deadlines.popleft()
            if sub.key not in self.subscribers:
                continue
            # Every id handed out at that deadline is <= last_id; those still in flight expire.
            expired = [i for i in sub.inflight if i <= last_id]
            for id_ in expired:
                entry = sub.inflight.pop(id_)
                self._unown(entry)
                copy = self._fail(
                    entry, None, f"ack timeout (ack.timeout.ms={int(self.ack_timeout * 1000)})",
                    wall_ms,
                )
                if copy is not None:
                    copies.append(copy)
        return copies

    def _promote(self, wall_ms: int) -> None:
        held = self.held
        while held and held[0][0] <= wall_ms:
            self.settled.append((heapq.heappop(held)[2], RELEASE))
        delayed = self.delayed
        while delayed and delayed[0][0] <= wall_ms:
            entry = heapq.heappop(delayed)[2]
            self.pending -= 1
            self.pending_bytes -= entry.size
            self._ready(entry, front=False, any_=True)

    def next_wakeup(self, now: float, wall_ms: int) -> float | None:
        """Seconds from ``now`` until ``serve``/``tick`` has something to do by the clock
        (a poll's wait ends, a retry falls due, an ack deadline passes); None: nothing."""
        times = [sub.fetch[2] - now for sub in self.subscribers.values() if sub.fetch]
        if self.delayed:
            times.append((self.delayed[0][0] - wall_ms) / 1000)
        if self.held:
            times.append((self.held[0][0] - wall_ms) / 1000)
        if self._deadlines:
            times.append(self._deadlines[0][0] - now)
        return max(min(times), 0.0) if times else None

    # --- offsets and rebalances ------------------------------------------------------------

    def committable(self) -> dict[tuple[str, int], int]:
        """{(topic, partition): offset} safe to commit and not committed yet."""
        out = {}
        committed = self._committed
        for tp, prog in self.progress.items():
            offset = prog.committable()
            if offset is not None and committed.get(tp) != offset:
                out[tp] = offset
        return out

    def mark_committed(self, offsets: dict[tuple[str, int], int]) -> None:
        self._committed.update(offsets)

    def revoke(self, tps: Iterable[tuple[str, int]]) -> None:
        """The group took these partitions away: forget them.  Their messages held by apps
        are no longer ours (an ack for them is ignored); the new owner reads them again from
        the committed offset."""
        gone = set(tps)
        if not gone:
            return
        for tp in gone:
            self.progress.pop(tp, None)
            self._committed.pop(tp, None)

        def keep(entry: Entry) -> bool:
            return entry.source not in gone

        for partition, queue in list(self.ready.items()):
            kept = self._filter(queue, keep)
            if kept:
                self.ready[partition] = kept
            else:
                del self.ready[partition]
                owner = self.owner.pop(partition, None)
                if owner is not None:
                    owner.owned -= 1
                self.owner_inflight.pop(partition, None)
        self.ready_any = self._filter(self.ready_any, keep)
        delayed = [item for item in self.delayed if keep(item[2])]
        self._filter((item[2] for item in self.delayed), keep)
        heapq.heapify(delayed)
        self.delayed = delayed
        for sub in self.subscribers.values():
            for id_ in [i for i, e in sub.inflight.items() if not keep(e)]:
                del sub.inflight[id_]

    def _filter(self, entries: Iterable[Entry], keep) -> deque[Entry]:
        """The entries to ``keep``; the others leave the pending counts."""
        kept: deque[Entry] = deque()
        for entry in entries:
            if keep(entry):
                kept.append(entry)
            else:
                self.pending -= 1
                self.pending_bytes -= entry.size
        return kept

    @property
    def in_flight(self) -> int:
        return sum(len(sub.inflight) for sub in self.subscribers.values())
