"""The history of a verification run: every client operation, as Jepsen records it.

An operation is invoked, then completes once as ``ok`` (it happened), ``fail`` (it
certainly did not happen) or ``info`` (nobody knows: a timeout, a crash, a lost answer).
Both halves are recorded with the same ``id``; ids grow in invoke order, so a process's
operations are ordered by id even when its sends are pipelined and complete out of order.

The operations (``f``) of the queue workload:

- ``send``: ``writes`` is a tuple of Write(partition, value, offset).  A transactional
  producer records one send per transaction (``txn`` names it): ``ok`` = committed,
  ``fail`` = aborted (on purpose or refused), ``info`` = the commit's outcome is unknown.
  An idempotent (or plain) producer records one send per record; ``ok`` = acknowledged.
  The offset is the acknowledged one (None when the producer learns none: acks=0, fail).
- ``poll``: ``reads`` is a tuple of Read(partition, offset, value), in delivery order.
- ``assign``: the process (re)gained ``partitions`` (assign(), a group's rebalance, a
  restart): its next read of each may start anywhere; successive reads are compared only
  between two assigns.
- ``drain``: ``ends`` maps partition -> the end offset a final read reached (every record
  below it was delivered to the drain's polls, recorded as ``poll`` by the same process).
- ``nemesis``: a fault started or healed (``fault`` names it); no client meaning.

Pure data, no I/O: histories are built by the workloads (databus/verify/workload.py),
written as JSON lines, and checked by databus/verify/checker.py.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"
TYPES = (INVOKE, OK, FAIL, INFO)


@dataclass(frozen=True)
class Write:
    partition: int
    value: str
    offset: int | None = None


@dataclass(frozen=True)
class Read:
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class Op:
    id: int                      # shared by an invoke and its completion
    process: str                 # the client (or "nemesis") that ran it
    type: str                    # invoke / ok / fail / info
    f: str                       # send / poll / assign / drain / nemesis
    time: float = 0.0            # seconds since the run started
    writes: tuple[Write, ...] = ()
    reads: tuple[Read, ...] = ()
    partitions: tuple[int, ...] = ()
    ends: Mapping[int, int] = field(default_factory=dict)
    txn: str | None = None       # the transaction's name (transactional sends)
    fault: str | None = None     # nemesis: what was done
    error: str | None = None     # fail / info: why

    def to_json(self) -> str:
        doc: dict = {"id": self.id, "process": self.process, "type": self.type, "f": self.f,
                     "time": round(self.time, 4)}
        if self.writes:
            doc["writes"] = [[w.partition, w.value, w.offset] for w in self.writes]
        if self.reads:
            doc["reads"] = [[r.partition, r.offset, r.value] for r in self.reads]
        if self.partitions:
            doc["partitions"] = list(self.partitions)
        if self.ends:
            doc["ends"] = {str(p): o for p, o in self.ends.items()}
        for name in ("txn", "fault", "error"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Op:
        doc = json.loads(line)
        return cls(
            id=doc["id"], process=doc["process"], type=doc["type"], f=doc["f"],
            time=doc.get("time", 0.0),
            writes=tuple(Write(p, v, o) for p, v, o in doc.get("writes", ())),
            reads=tuple(Read(p, o, v) for p, o, v in doc.get("reads", ())),
            partitions=tuple(doc.get("partitions", ())),
            ends={int(p): o for p, o in doc.get("ends", {}).items()},
            txn=doc.get("txn"), fault=doc.get("fault"), error=doc.get("error"),
        )

    def describe(self) -> str:
        """One short line for a verdict's examples."""
        what = f"#{self.id} {self.process} {self.f} {self.type}"
        if self.txn:
            what += f" txn={self.txn}"
        if self.writes:
            shown = ", ".join(f"p{w.partition}@{w.offset}={w.value}" for w in self.writes[:4])
            what += f" [{shown}{', ...' if len(self.writes) > 4 else ''}]"
        if self.error:
            what += f" ({self.error})"
        return what


def completions(ops: Iterable[Op]) -> list[Op]:
    """The completed operations (ok / fail / info), in id (invoke) order.  An invoke with no
    completion (the run ended first) counts as ``info``: it may or may not have happened."""
    done: dict[int, Op] = {}
    invoked: dict[int, Op] = {}
    for op in ops:
        if op.type == INVOKE:
            invoked[op.id] = op
        else:
            done[op.id] = op
    for op_id, op in invoked.items():
        if op_id not in done:
            done[op_id] = Op(op.id, op.process, INFO, op.f, op.time, op.writes, op.reads,
                             op.partitions, op.ends, op.txn, op.fault, "never completed")
    return [done[i] for i in sorted(done)]


def dumps(ops: Iterable[Op]) -> str:
    return "".join(op.to_json() + "\n" for op in ops)


def loads(text: str) -> list[Op]:
    return [Op.from_json(line) for line in text.splitlines() if line.strip()]


def stage_history(ops: Iterable[Op], stage: str, held: Iterable[Read]) -> list[Op]:
    """The run's history as a later stage of the pipeline sees it, for checker.check: the
    sends with their offsets dropped (the stage keeps its own: the mirror's target offsets,
    a sink's files), then what the stage ``held`` (Read(partition, position in the stage,
    value)) as one consumer ``stage:NAME`` that polled each partition in order and drained
    every partition the sends wrote.  The queue workload's classes then read as the stage's:
    an acknowledged value the stage lacks is a lost-write, one it holds twice a duplicate, a
    failed send's value in it an aborted-read, a committed transaction partly copied torn."""
    ops = list(ops)
    out = [replace(op, writes=tuple(Write(w.partition, w.value) for w in op.writes))
           for op in ops if op.f == "send"]
    process = f"stage:{stage}"
    by_partition: dict[int, list[Read]] = defaultdict(list)
    for r in held:
        by_partition[r.partition].append(r)
    partitions = sorted({w.partition for op in out for w in op.writes} | set(by_partition))
    next_id = max((op.id for op in ops), default=-1) + 1

    def event(f: str, **kw) -> None:
        nonlocal next_id
        out.append(Op(next_id, process, INVOKE, f, partitions=kw.get("partitions", ())))
        out.append(Op(next_id, process, OK, f, **kw))
        next_id += 1

    event("assign", partitions=tuple(partitions))
    for p in partitions:
        reads = tuple(sorted(by_partition.get(p, ()), key=lambda r: r.offset))
        if reads:
            event("poll", reads=reads)
    event("drain", ends={p: max((r.offset + 1 for r in by_partition.get(p, ())), default=0)
                         for p in partitions})
    return out
