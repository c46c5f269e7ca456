"""Transactional ("half") messages with check-back, the pure part; the trio shell is
half/service.py (docs/transactions.md, "Half messages").

An app's transaction (``with client.transaction(stream, check=callback) as tx``) writes its
messages as *half messages* to the topic ``databus-txn-half`` of the stream's cluster, all
of one transaction to one partition (chosen by the transaction id), and ends with an *end
record* (``commit`` or ``rollback``) in the same partition, after its messages.  Consumers
of the stream's topic see nothing until a member of the half service (a consumer group over
``databus-txn-half``) reads the end record and writes the transaction's messages to their
topics (commit) or drops them (rollback).  Kafka-style: the end record is a marker in the
same partition, so the member has every message of the transaction when it sees it.

A transaction without an end record ``check.ms`` after its first message is *checked*: a
check request (producer group, transaction id) goes to the topic ``databus-txn-check``,
which every sidecar with the service reads; a sidecar with an app that registered a check
callback for that group asks it, and the app's answer is an end record like any other.
After ``max.checks`` unanswered checks the member writes a rollback end record itself (and
logs it).  Offsets are committed below the first message of the oldest open transaction.

Headers of a half message (the app's own follow):

    databus-txn          the transaction id (first: how the sidecar tells it apart)
    databus-txn-group    the producer group (whose apps answer checks)
    databus-txn-target   the topic it goes to on commit
    databus-txn-partition the partition asked for (only when the app named one)

An end record has ``databus-txn-end`` (the transaction id) first, then
``databus-txn-group``, and ``commit`` or ``rollback`` as its value.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from databus.protocol.sidecar_wire import (
    TXN_END_HEADER,
    TXN_GROUP_HEADER,
    TXN_HEADER,
    TXN_PARTITION_HEADER,
    TXN_TARGET_HEADER,
)
from databus.protocol.types import TopicPartition

HALF_TOPIC = "databus-txn-half"
CHECK_TOPIC = "databus-txn-check"
COMMIT, ROLLBACK = b"commit", b"rollback"
_OURS = frozenset({TXN_HEADER, TXN_GROUP_HEADER, TXN_TARGET_HEADER, TXN_PARTITION_HEADER,
                   TXN_END_HEADER})
RESOLVED_REMEMBERED = 100_000



@dataclass(frozen=True)
class HalfMessage:
    target: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple  # the app's own


def half_headers(txn_id: str, group: str, target: str, partition: int | None,
                 app_headers: Iterable) -> list[tuple[str, bytes]]:
    ours = [(TXN_HEADER, txn_id.encode()), (TXN_GROUP_HEADER, group.encode()),
            (TXN_TARGET_HEADER, target.encode())]
    if partition is not None:
        ours.append((TXN_PARTITION_HEADER, str(partition).encode()))
    return ours + [tuple(h) for h in app_headers]


def end_headers(txn_id: str, group: str) -> list[tuple[str, bytes]]:
    return [(TXN_END_HEADER, txn_id.encode()), (TXN_GROUP_HEADER, group.encode())]


def _split(headers) -> tuple[dict[str, bytes], tuple]:
    ours: dict[str, bytes] = {}
    rest = []
    for name, data in headers or ():
        if name in _OURS and name not in ours:
            ours[name] = data or b""
        else:
            rest.append((name, data))
    return ours, tuple(rest)


@dataclass
class OpenTxn:
    tp: TopicPartition
    first_offset: int
    first_ms: int
    group: str
    messages: list[HalfMessage] = field(default_factory=list)
    checks: int = 0


@dataclass(frozen=True)
class Resolution:
    """A transaction settled: deliver ``messages`` (commit) or not (rollback).
    ``first_offset``: its first record (where a replay must start to deliver it again)."""

    txn_id: str
    group: str
    commit: bool
    messages: tuple[HalfMessage, ...]
    first_offset: int


class HalfTracker:
    """The open transactions of the half partitions one member owns."""

    def __init__(self) -> None:
        self.open: dict[str, OpenTxn] = {}
        self.next_offsets: dict[TopicPartition, int] = {}
        self._resolved: OrderedDict[str, bool] = OrderedDict()

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.next_offsets.setdefault(tp, -1)

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        gone = set(tps)
        for tp in gone:
            self.next_offsets.pop(tp, None)
        self.open = {t: o for t, o in self.open.items() if o.tp not in gone}

    def add(self, tp: TopicPartition, records) -> tuple[list[Resolution], list[str]]:
        """Records of a half partition in offset order; the transactions they settle and
        the problems met (records that are neither, named)."""
        done: list[Resolution] = []
        problems: list[str] = []
        for record in records:
            self.next_offsets[tp] = record.offset + 1
            ours, rest = _split(record.headers)
            if TXN_END_HEADER in ours:
                txn_id = ours[TXN_END_HEADER].decode(errors="replace")
                if txn_id in self._resolved:
                    continue  # a second answer (several apps checked, a retry): first wins
                txn = self.open.pop(txn_id, None)
                commit = record.value == COMMIT
                self._remember(txn_id, commit)
                group = ours.get(TXN_GROUP_HEADER, b"").decode(errors="replace")
                done.append(Resolution(txn_id, group, commit,
                                       tuple(txn.messages) if txn else (),
                                       txn.first_offset if txn else record.offset))
            elif TXN_HEADER in ours and TXN_TARGET_HEADER in ours:
                txn_id = ours[TXN_HEADER].decode(errors="replace")
                if txn_id in self._resolved:
                    problems.append(f"offset {record.offset}: message of transaction "
                                    f"{txn_id} after its end; dropped")
                    continue
                txn = self.open.get(txn_id)
                if txn is None:
                    txn = self.open[txn_id] = OpenTxn(
                        tp, record.offset, record.timestamp,
                        ours.get(TXN_GROUP_HEADER, b"").decode(errors="replace"))
                partition = ours.get(TXN_PARTITION_HEADER)
                txn.messages.append(HalfMessage(
                    ours[TXN_TARGET_HEADER].decode(errors="replace"),
                    int(partition) if partition else None, record.key, record.value, rest))
            else:
                problems.append(f"offset {record.offset}: not a half message; skipped")
        return done, problems

    def _remember(self, txn_id: str, commit: bool) -> None:
        self._resolved[txn_id] = commit
        if len(self._resolved) > RESOLVED_REMEMBERED:
            self._resolved.popitem(last=False)

    def due_checks(self, now_ms: int, check_ms: int,
                   max_checks: int) -> tuple[list[OpenTxn], list[tuple[str, OpenTxn]]]:
        """(transactions to check now, (id, transaction) to roll back: checked
        ``max_checks`` times without an answer).  A transaction is checked ``check.ms``
        after its first message, then every ``check.ms``."""
        checks, rollbacks = [], []
        for txn_id, txn in self.open.items():
            if now_ms < txn.first_ms + check_ms * (txn.checks + 1):
                continue
            if txn.checks >= max_checks:
                rollbacks.append((txn_id, txn))
            else:
                txn.checks += 1
                checks.append((txn_id, txn))
        return checks, rollbacks

    def safe_offsets(self, unfinished: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Per partition read, the offset a commit may name: below the first record of
        every open transaction and every ``unfinished`` offset (the lowest per partition:
        the start of a committed transaction whose writes are not acknowledged)."""
        out = {tp: o for tp, o in self.next_offsets.items() if o >= 0}
        for tp, offset in unfinished.items():
            if tp in out:
                out[tp] = min(out[tp], offset)
        for txn in self.open.values():
            if txn.tp in out:
                out[txn.tp] = min(out[txn.tp], txn.first_offset)
        return out
