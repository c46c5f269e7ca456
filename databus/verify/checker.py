"""Check a queue history (databus/verify/history.py) for Jepsen's Kafka anomaly classes.

Pure: a list of operations in, a Verdict out.  The definitions follow Jepsen's Kafka
workload (jepsen.tests.kafka, the Redpanda and Bufstream analyses), with a partition as
Jepsen's "key":

- **lost-write**: a write acknowledged (a committed transaction's, or an acknowledged
  send's) that no consumer ever read, although some consumer read past its offset in its
  partition (or, offset unknown, a final drain read the whole partition).
- **duplicate**: one value at two or more offsets (values are unique by construction, so
  the log holds it twice).  At-least-once producers document these: pass it in ``allow``.
- **inconsistent-offsets**: one offset of a partition holding two different values.
- **poll-skip**: one consumer's successive reads of a partition (no assign between) jump
  over offsets that hold visible values (values someone read, or acknowledged writes).
- **nonmonotonic-poll**: one consumer's successive reads of a partition go back or repeat.
- **nonmonotonic-send**: one producer's successive acknowledged writes to a partition get
  offsets that go back or repeat.
- **aborted-read**: a read of a value whose send failed (an aborted transaction's, read by
  a read_committed consumer, or a send that was refused).
- **torn-transaction**: a committed (or unknown) transaction with some writes read and
  others missing although a consumer read past them.
- **G0** (write cycle): transactions ordered one way in one partition and the other way in
  another (ww edges: consecutive offsets).  Kafka's transaction protocol does not prevent
  it (writers take no locks), so the queue workload allows it by default.
- **G1c** (circular information flow): a cycle of ww and wr edges (T1's write read by T2)
  with at least one wr edge, among operations that both read and write.

Separate from anomalies, ``unseen`` counts acknowledged writes nobody read and nobody read
past (nothing wrong yet: they are lost writes only once a read passes them).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .history import FAIL, INFO, OK, Op, Read, Write, completions

CLASSES: dict[str, str] = {
    "lost-write": "acknowledged, never read, although a consumer read past its offset",
    "duplicate": "one value at two or more offsets",
    "inconsistent-offsets": "one offset holding two different values",
    "poll-skip": "a consumer's successive reads jumped over visible offsets",
    "nonmonotonic-poll": "a consumer's successive reads went back or repeated",
    "nonmonotonic-send": "a producer's successive writes got offsets that went back",
    "aborted-read": "a value of an aborted (failed) send was read",
    "torn-transaction": "a committed transaction partly visible",
    "G0": "write cycle across transactions (ww edges only)",
    "G1c": "cycle of write-write and write-read edges across transactions",
}

# What Kafka itself does not promise, whatever the setup (see G0 above).
DEFAULT_ALLOW: frozenset[str] = frozenset({"G0"})

EXAMPLES = 5  # examples kept per class


@dataclass
class Found:
    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, example: str) -> None:
        self.count += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(example)


@dataclass
class Verdict:
    anomalies: dict[str, Found]
    allow: frozenset[str]
    stats: dict[str, int]

    @property
    def valid(self) -> bool:
        return not any(f.count for name, f in self.anomalies.items() if name not in self.allow)

    def counts(self) -> dict[str, int]:
        return {name: f.count for name, f in self.anomalies.items()}


class _Index:
    """The history, indexed once: who wrote each value, who read it, each partition's log."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        self.writer: dict[str, tuple[Op, Write]] = {}
        self.reads: list[tuple[Op, Read]] = []
        self.readers: dict[str, list[tuple[Op, Read]]] = defaultdict(list)
        self.drained: dict[int, int] = {}
        # partition -> offset -> values there (acknowledged writes and reads)
        self.log: dict[int, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
        for op in ops:
            if op.f == "drain" and op.type == OK:
                for p, end in op.ends.items():
                    self.drained[p] = max(end, self.drained.get(p, end))
            for w in op.writes:
                self.writer.setdefault(w.value, (op, w))
                if op.type == OK and w.offset is not None:
                    self.log[w.partition][w.offset].add(w.value)
            if op.type == OK:
                for r in op.reads:
                    self.reads.append((op, r))
                    self.readers[r.value].append((op, r))
                    self.log[r.partition][r.offset].add(r.value)
        self.max_read: dict[int, int] = {}
        for _, r in self.reads:
            self.max_read[r.partition] = max(r.offset, self.max_read.get(r.partition, -1))
        # partition -> sorted offsets holding a visible value (not only a failed send's)
        self.visible: dict[int, list[int]] = {p: sorted(offs) for p, offs in self.log.items()}

    def read_past(self, w: Write) -> bool:
        """Did a consumer read beyond this write's place in its partition?"""
        if w.offset is None:
            return w.partition in self.drained
        if self.drained.get(w.partition, -1) > w.offset:
            return True
        return self.max_read.get(w.partition, -1) > w.offset


def check(ops: Iterable[Op], allow: Iterable[str] = DEFAULT_ALLOW) -> Verdict:
    done = completions(ops)
    idx = _Index(done)
    found = {name: Found() for name in CLASSES}
    stats = _stats(idx)
    stats["unseen"] = _lost_writes(idx, found)
    _duplicates(idx, found)
    _inconsistent_offsets(idx, found)
    _polls(idx, found)
    _sends(idx, found)
    _aborted_reads(idx, found)
    _torn(idx, found)
    _cycles(idx, found)
    return Verdict(found, frozenset(allow), stats)


def _stats(idx: _Index) -> dict[str, int]:
    stats = {"operations": len(idx.ops), "reads": len(idx.reads)}
    for kind in (OK, FAIL, INFO):
        stats[f"writes-{kind}"] = sum(len(op.writes) for op in idx.ops
                                      if op.f == "send" and op.type == kind)
    stats["transactions"] = sum(1 for op in idx.ops if op.f == "send" and op.txn)
    stats["faults"] = sum(1 for op in idx.ops if op.f == "nemesis" and op.type == OK
                          and (op.fault or "").startswith("start"))
    stats["values-read"] = len(idx.readers)
    return stats


def _lost_writes(idx: _Index, found: dict[str, Found]) -> int:
    """Reports the lost writes; returns how many acknowledged writes are merely unseen."""
    unseen = 0
    for op in idx.ops:
        if op.f != "send" or op.type != OK:
            continue
        for w in op.writes:
            if w.value in idx.readers:
                continue
            if idx.read_past(w):
                past = idx.max_read.get(w.partition, -1)
                found["lost-write"].add(
                    f"value {w.value} p{w.partition}@{w.offset}: acknowledged by {op.describe()}; "
                    f"never read, reads reached p{w.partition}@{past}"
                    + (f", drain reached {idx.drained[w.partition]}"
                       if w.partition in idx.drained else ""))
            else:
                unseen += 1
    return unseen


def _duplicates(idx: _Index, found: dict[str, Found]) -> None:
    places: dict[str, set[tuple[int, int]]] = defaultdict(set)
    for p, offsets in idx.log.items():
        for o, values in offsets.items():
            for v in values:
                places[v].add((p, o))
    for v, where in sorted(places.items()):
        if len(where) > 1:
            shown = ", ".join(f"p{p}@{o}" for p, o in sorted(where))
            writer = idx.writer.get(v)
            found["duplicate"].add(f"value {v} at {shown}"
                                   + (f"; written by {writer[0].describe()}" if writer else ""))


def _inconsistent_offsets(idx: _Index, found: dict[str, Found]) -> None:
    for p in sorted(idx.log):
        for o in sorted(idx.log[p]):
            values = idx.log[p][o]
            if len(values) > 1:
                found["inconsistent-offsets"].add(f"p{p}@{o} holds {sorted(values)}")


def _polls(idx: _Index, found: dict[str, Found]) -> None:
    last: dict[tuple[str, int], tuple[int, Op]] = {}
    for op in idx.ops:
        if op.f == "assign" and op.type == OK:
            for p in op.partitions:
                last.pop((op.process, p), None)
            continue
        if op.type != OK or not op.reads:
            continue
        for r in op.reads:
            key = (op.process, r.partition)
            prev = last.get(key)
            last[key] = (r.offset, op)
            if prev is None:
                continue
            before, prev_op = prev
            where = "within one poll" if prev_op is op else f"after poll #{prev_op.id}"
            if r.offset <= before:
                found["nonmonotonic-poll"].add(
                    f"{op.process} read p{r.partition}@{before} then p{r.partition}@{r.offset} "
                    f"(poll #{op.id}, {where})")
                continue
            offsets = idx.visible.get(r.partition, [])
            lo = bisect.bisect_right(offsets, before)
            hi = bisect.bisect_left(offsets, r.offset)
            if hi > lo:
                skipped = offsets[lo:hi]
                values = [sorted(idx.log[r.partition][o])[0] for o in skipped[:3]]
                found["poll-skip"].add(
                    f"{op.process} read p{r.partition}@{before} then p{r.partition}@{r.offset} "
                    f"(poll #{op.id}, {where}), skipping {len(skipped)} visible offset(s) "
                    f"{skipped[:3]} = {values}")


def _sends(idx: _Index, found: dict[str, Found]) -> None:
    last: dict[tuple[str, int], tuple[int, Op]] = {}
    for op in idx.ops:
        if op.f != "send" or op.type != OK:
            continue
        for w in op.writes:
            if w.offset is None:
                continue
            key = (op.process, w.partition)
            prev = last.get(key)
            last[key] = (w.offset, op)
            if prev is not None and w.offset <= prev[0]:
                found["nonmonotonic-send"].add(
                    f"{op.process} wrote p{w.partition}@{prev[0]} ({prev[1].describe()}) then "
                    f"p{w.partition}@{w.offset} ({op.describe()})")


def _aborted_reads(idx: _Index, found: dict[str, Found]) -> None:
    for v, readers in sorted(idx.readers.items()):
        writer = idx.writer.get(v)
        if writer is None or writer[0].type != FAIL:
            continue
        for op, r in readers:
            found["aborted-read"].add(
                f"value {v} read at p{r.partition}@{r.offset} by {op.process} (poll #{op.id}); "
                f"its send failed: {writer[0].describe()}")


def _torn(idx: _Index, found: dict[str, Found]) -> None:
    for op in idx.ops:
        if op.f != "send" or not op.txn or op.type == FAIL:
            continue
        seen = [w for w in op.writes if w.value in idx.readers]
        missing = [w for w in op.writes if w.value not in idx.readers and idx.read_past(w)]
        if seen and missing:
            found["torn-transaction"].add(
                f"{op.describe()}: read {[w.value for w in seen[:3]]}, missing "
                f"{[f'{w.value} p{w.partition}@{w.offset}' for w in missing[:3]]} "
                f"({len(seen)} of {len(op.writes)} visible)")


def _cycles(idx: _Index, found: dict[str, Found]) -> None:
    """ww edges from each partition's offset order, wr edges from writer to reader; G0 is
    a cycle of ww edges, G1c one that needs a wr edge."""
    ww: dict[int, set[int]] = defaultdict(set)
    wr: dict[int, set[int]] = defaultdict(set)
    by_id = {op.id: op for op in idx.ops}
    for offsets in idx.log.values():
        prev_writer = None
        for o in sorted(offsets):
            writers = {idx.writer[v][0].id for v in offsets[o] if v in idx.writer}
            writer = by_id[writers.pop()] if len(writers) == 1 else None
            if writer is None or writer.type == FAIL:
                prev_writer = None
                continue
            if prev_writer is not None and prev_writer.id != writer.id:
                ww[prev_writer.id].add(writer.id)
            prev_writer = writer
    for v, readers in idx.readers.items():
        if v not in idx.writer:
            continue
        w_op = idx.writer[v][0]
        for r_op, _ in readers:
            if r_op.id != w_op.id and r_op.writes:  # only an op that writes can close a cycle
                wr[w_op.id].add(r_op.id)
    for scc in _sccs(ww):
        cycle = _find_cycle(scc, ww)
        found["G0"].add("ww cycle: " + " -> ".join(by_id[i].describe() for i in cycle))
    both: dict[int, set[int]] = defaultdict(set)
    for graph in (ww, wr):
        for a, bs in graph.items():
            both[a] |= bs
    for scc in _sccs(both):
        if any(b in scc for a in scc for b in wr.get(a, ())):
            cycle = _find_cycle(scc, both)
            found["G1c"].add("ww/wr cycle: " + " -> ".join(by_id[i].describe() for i in cycle))


def _sccs(graph: dict[int, set[int]]) -> list[set[int]]:
    """Strongly connected components of more than one node (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    result: list[set[int]] = []
    counter = 0
    for root in list(graph):
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    result.append(component)
    return result


def _find_cycle(scc: set[int], graph: dict[int, set[int]]) -> list[int]:
    """A shortest cycle through the SCC's smallest node (BFS), ending where it started."""
    start = min(scc)
    parents: dict[int, int] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph.get(node, ())):
                if child not in scc:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if child not in parents:
                    parents[child] = node
                    nxt.append(child)
        frontier = nxt
    return [start]


def format_verdict(verdict: Verdict, *, seed: int | None = None, header: str = "",
                   label: str = "verdict") -> str:
    lines = []
    if header:
        lines.append(header)
    stats = verdict.stats
    lines.append(
        f"history: {stats['operations']} operations; writes {stats['writes-ok']} ok, "
        f"{stats['writes-fail']} failed, {stats['writes-info']} unknown "
        f"({stats['transactions']} transactions); {stats['reads']} reads of "
        f"{stats['values-read']} values; {stats['faults']} faults; "
        f"{stats['unseen']} acknowledged writes unseen")
    width = max(map(len, CLASSES))
    for name, what in CLASSES.items():
        f = verdict.anomalies[name]
        if f.count == 0:
            state = "ok"
        elif name in verdict.allow:
            state = f"{f.count} (allowed in this mode)"
        else:
            state = f"{f.count} FOUND"
        lines.append(f"  {name:<{width}}  {state:<28} {what}")
        for example in f.examples:
            lines.append(f"      e.g. {example}")
    lines.append(f"{label}: {'VALID' if verdict.valid else 'INVALID'}"
                 + (f" (seed {seed}: rerun with --seed {seed} for the same fault schedule)"
                    if seed is not None else ""))
    return "\n".join(lines)
