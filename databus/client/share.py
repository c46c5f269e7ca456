"""The share consumer's sans-I/O core (KIP-932): share sessions, acquired records,
acknowledgements.  No trio, no sockets: share_consumer.py is the thin trio shell around it.

- ``ShareSession``: one per broker the member fetches from.  The epoch the next ShareFetch
  or ShareAcknowledge carries (0 opens the session, then 1, 2, ... wrapping from 2^31-1 to
  1; -1 closes it) and the partitions the broker already knows in the session, so that a
  request names only partitions to add (``topics``) and to drop (``forgotten_topics_data``).
  An epoch is spent when the request is written: requests of one session are written in
  order on one connection and the broker handles a connection's requests in order.
- ``acquired_records``: a ShareFetch partition's record batches filtered to the ranges the
  member acquired, each record carrying its range's delivery count.  The broker returns
  whole batches: records outside the acquired ranges belong to others and are not
  delivered; offsets inside a range with no record (compacted away, control records) are
  acknowledged as GAP.
- ``PartitionAcks``: per partition, the records poll() handed out and not yet acknowledged
  (implicit mode accepts them at the next poll or commit) and the acknowledgements not yet
  sent; ``take_batches`` turns the latter into acknowledgement batches, one per run of
  consecutive offsets with one type (ranges, not a type per offset).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import IntEnum

from .fetcher import ConsumerRecord, decode_fetched, share_record_class

OPEN_EPOCH = 0
FINAL_EPOCH = -1
GAP = 0  # the acknowledge type of an offset that has no record


class AcknowledgeType(IntEnum):
    """How a share consumer settles a record (Kafka's values, as on the wire)."""

    ACCEPT = 1  # processed: never delivered again
    RELEASE = 2  # not processed: delivered again (to any member), delivery count + 1
    REJECT = 3  # unprocessable: archived, never delivered again
    RENEW = 4  # still working on it: the lock starts again (KIP-1222; brokers with v2)


def next_epoch(epoch: int) -> int:
    """Share session epochs wrap from 2^31-1 to 1 (0 opens, -1 closes)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


PartitionId = tuple[uuid.UUID, int]  # (topic id, partition): how share requests name them


@dataclass
class ShareSession:
    """The member's share session on one broker (see module docstring)."""

    epoch: int = OPEN_EPOCH
    known: set[PartitionId] = field(default_factory=set)

    @property
    def is_open(self) -> bool:
        return self.epoch != OPEN_EPOCH

    def plan(self, wanted: set[PartitionId]) -> tuple[list[PartitionId], list[PartitionId]]:
        """(partitions to add, partitions to forget) for a request that wants exactly
        ``wanted`` in the session.  A session being opened knows nothing yet."""
        known = self.known if self.is_open else set()
        return sorted(wanted - known, key=str), sorted(known - wanted, key=str)

    def sent(self, wanted: set[PartitionId]) -> int:
        """A request for ``wanted`` was written: its epoch; the next request gets the next."""
        epoch = self.epoch
        self.epoch = next_epoch(epoch)
        self.known = set(wanted)
        return epoch

    def reset(self) -> None:
        """The broker lost or refused the session (SHARE_SESSION_NOT_FOUND,
        INVALID_SHARE_SESSION_EPOCH, a broken connection): the next request opens a new
        one, and the broker has released whatever the old one held."""
        self.epoch = OPEN_EPOCH
        self.known = set()


def acquired_records(topic: str, partition: int, data: bytes,
                     ranges: Iterable[tuple[int, int, int]], *, check_crcs: bool = True,
                     ) -> tuple[list[ConsumerRecord], list[tuple[int, int]]]:
    """The records of ``data`` inside the acquired ``ranges`` (first, last, delivery count),
    each with its delivery count, and the offsets of the ranges that have no record, as
    (first, last) runs to acknowledge as GAP."""
    ranges = sorted(ranges)
    if not ranges:
        return [], []
    counts = {count for _, _, count in ranges}
    # the usual case, one delivery count for all: records are built with it at once
    one = counts.pop() if len(counts) == 1 else None
    decoded, _ = decode_fetched(topic, partition, data, ranges[0][0], check_crcs=check_crcs,
                                delivery_count=one)
    out: list[ConsumerRecord] = []
    gaps: list[tuple[int, int]] = []
    new = tuple.__new__
    i, n = 0, len(decoded)
    for first, last, count in ranges:
        while i < n and decoded[i][2] < first:
            i += 1  # another member's record in a shared batch
        start = i
        while i < n and decoded[i][2] <= last:
            i += 1
        taken = decoded[start:i]
        if len(taken) != last - first + 1:  # offsets without a record: GAP
            expected = first
            for r in taken:
                if r[2] > expected:
                    gaps.append((expected, r[2] - 1))
                expected = r[2] + 1
            if expected <= last:
                gaps.append((expected, last))
        if one is None:
            cls = share_record_class(count)
            taken = [new(cls, r) for r in taken]
        out += taken
    return out, gaps


@dataclass
class PartitionAcks:
    """Acknowledgement state of one partition (see module docstring)."""

    topic_id: uuid.UUID
    node: int  # the broker whose share session acquired the records
    delivered: dict[int, int] = field(default_factory=dict)  # offset -> delivery count
    pending: list[tuple[int, int]] = field(default_factory=list)  # (offset, type) to send
    # handed out by a session that is gone: the broker released them, acknowledging them
    # is no error (there is nothing left to settle)
    lost: set[int] = field(default_factory=set)

    def hand_out(self, records: Iterable[ConsumerRecord]) -> None:
        self.delivered.update((r[2], r.delivery_count) for r in records)

    def acknowledge(self, offset: int, kind: int) -> bool | None:
        """Settle a record poll() handed out: True; None if its session is gone (nothing
        to do); False if it was not handed out or is settled already."""
        if kind == AcknowledgeType.RENEW:
            # the record stays handed out (it is settled later); the lock starts again
            if offset not in self.delivered:
                return None if offset in self.lost else False
            self.pending.append((offset, kind))
            return True
        if self.delivered.pop(offset, None) is None:
            if offset in self.lost:
                self.lost.discard(offset)
                return None
            return False
        self.pending.append((offset, kind))
        return True

    def accept_delivered(self) -> None:
        """Implicit mode: every record handed out and not settled is accepted."""
        if self.delivered:
            self.pending.extend((offset, AcknowledgeType.ACCEPT) for offset in self.delivered)
            self.delivered.clear()

    def add_gaps(self, gaps: Iterable[tuple[int, int]]) -> None:
        for first, last in gaps:
            self.pending.extend((offset, GAP) for offset in range(first, last + 1))

    def take_batches(self) -> tuple[list[dict], list[int]]:
        """The pending acknowledgements as wire batches (first_offset, last_offset, one
        type), and the offsets they cover; nothing stays pending."""
        if not self.pending:
            return [], []
        pending = sorted(self.pending)
        self.pending = []
        batches: list[dict] = []
        first, last, kind = pending[0][0], pending[0][0], pending[0][1]
        for offset, k in pending[1:]:
            if offset == last + 1 and k == kind:
                last = offset
                continue
            batches.append({"first_offset": first, "last_offset": last,
                            "acknowledge_types": [kind]})
            first = last = offset
            kind = k
        batches.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
        return batches, [offset for offset, _ in pending]

    def forget(self) -> None:
        """The session that acquired these records is gone: nothing of it can be settled."""
        self.lost.update(self.delivered)
        self.delivered.clear()
        self.pending.clear()
