"""The checker on hand-made histories: each anomaly class is found (with an example naming
its value / offsets / operation), and a clean history passes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from databus.verify.checker import CLASSES, check, format_verdict
from databus.verify.history import (
    FAIL,
    INFO,
    INVOKE,
    OK,
    Op,
    Read,
    Write,
    completions,
    dumps,
    loads,
    stage_history,
)


class H:
    """A history builder: each call appends an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, process, type_, f, **kw) -> Op:
        op_id = len(self.ops)
        self.ops.append(Op(op_id, process, INVOKE, f, **{k: v for k, v in kw.items()
                                                          if k not in ("reads", "ends", "error")}))
        done = Op(op_id, process, type_, f, **kw)
        self.ops.append(done)
        return done

    def send(self, process, *writes, type_=OK, txn=None):
        return self._add(process, type_, "send", writes=tuple(Write(*w) for w in writes), txn=txn)

    def poll(self, process, *reads):
        return self._add(process, OK, "poll", reads=tuple(Read(*r) for r in reads))

    def assign(self, process, *partitions):
        return self._add(process, OK, "assign", partitions=partitions)

    def drain(self, process, ends):
        return self._add(process, OK, "drain", ends=ends)

    def rw(self, process, reads, writes, txn):
        return self._add(process, OK, "send", reads=tuple(Read(*r) for r in reads),
                         writes=tuple(Write(*w) for w in writes), txn=txn)


def anomalies(h: H, **kw) -> dict[str, int]:
    return {k: v for k, v in check(h.ops, **kw).counts().items() if v}


def clean() -> H:
    h = H()
    h.send("p0", (0, "a", 0))
    h.send("p0", (0, "b", 1))
    h.send("t0", (0, "c", 3), (1, "d", 0), txn="t0-1")  # offset 2: the first txn's marker
    h.send("t0", (0, "x", 5), (1, "y", 2), type_=FAIL, txn="t0-2")  # aborted
    h.assign("c0", 0, 1)
    h.poll("c0", (0, 0, "a"), (0, 1, "b"))
    h.poll("c0", (0, 3, "c"), (1, 0, "d"))
    h.drain("drain", {0: 7, 1: 4})
    return h


def test_clean_history_is_valid():
    verdict = check(clean().ops)
    assert verdict.valid, format_verdict(verdict)
    assert not any(verdict.counts().values())
    assert verdict.stats["writes-ok"] == 4 and verdict.stats["writes-fail"] == 2


def test_lost_write_when_a_read_passes_it():
    h = H()
    h.send("p0", (0, "a", 0))
    h.send("p0", (0, "b", 1))
    h.assign("c0", 0)
    h.poll("c0", (0, 1, "b"))
    verdict = check(h.ops)
    assert verdict.counts()["lost-write"] == 1 and not verdict.valid
    assert "value a p0@0" in verdict.anomalies["lost-write"].examples[0]
    assert "p0 send ok" in verdict.anomalies["lost-write"].examples[0]


def test_unread_write_nobody_read_past_is_unseen_not_lost():
    h = H()
    h.send("p0", (0, "a", 0))
    h.send("p0", (0, "b", 1))
    h.poll("c0", (0, 0, "a"))
    verdict = check(h.ops)
    assert verdict.valid
    assert verdict.stats["unseen"] == 1


def test_lost_write_without_offset_found_by_the_drain():
    h = H()
    h.send("p0", (0, "a", None))       # acks=0: acknowledged, no offset known
    h.send("p0", (0, "b", None))
    h.poll("drain", (0, 0, "b"))
    h.drain("drain", {0: 1})
    verdict = check(h.ops)
    assert verdict.counts()["lost-write"] == 1
    assert "value a" in verdict.anomalies["lost-write"].examples[0]


def test_duplicate_and_allowing_it():
    h = H()
    h.send("p0", (0, "a", 0))
    h.poll("c0", (0, 0, "a"), (0, 1, "a"))
    assert anomalies(h) == {"duplicate": 1}
    assert "p0@0, p0@1" in check(h.ops).anomalies["duplicate"].examples[0]
    assert check(h.ops, allow={"duplicate"}).valid
    assert "allowed in this mode" in format_verdict(check(h.ops, allow={"duplicate"}))


def test_inconsistent_offsets():
    h = H()
    h.send("p0", (0, "a", 0))
    h.poll("c0", (0, 0, "b"))
    found = anomalies(h)
    assert found["inconsistent-offsets"] == 1


def test_poll_skip_over_a_value_others_saw():
    h = H()
    for i, v in enumerate("abc"):
        h.send("p0", (0, v, i))
    h.poll("c1", (0, 0, "a"), (0, 1, "b"), (0, 2, "c"))
    h.assign("c0", 0)
    h.poll("c0", (0, 0, "a"))
    h.poll("c0", (0, 2, "c"))
    verdict = check(h.ops)
    assert verdict.counts()["poll-skip"] == 1
    assert "[1] = ['b']" in verdict.anomalies["poll-skip"].examples[0]


def test_gap_of_invisible_offsets_is_no_skip():
    # offsets 1-2 hold a marker and an aborted record: nobody sees them, no value is skipped
    h = H()
    h.send("p0", (0, "a", 0))
    h.send("t0", (0, "x", 1), type_=FAIL, txn="t-1")
    h.send("p0", (0, "b", 3))
    h.poll("c0", (0, 0, "a"), (0, 3, "b"))
    assert anomalies(h) == {}


def test_assign_resets_successive_reads():
    h = H()
    for i, v in enumerate("abc"):
        h.send("p0", (0, v, i))
    h.poll("c0", (0, 1, "b"), (0, 2, "c"))
    h.assign("c0", 0)                  # rebalance: starts again from the committed offset
    h.poll("c0", (0, 0, "a"), (0, 1, "b"))
    assert anomalies(h) == {}
    h2 = H()
    h2.ops = [op for op in h.ops if op.f != "assign"]
    assert anomalies(h2) == {"nonmonotonic-poll": 1}


def test_nonmonotonic_poll_within_one_poll():
    h = H()
    h.send("p0", (0, "a", 0))
    h.send("p0", (0, "b", 1))
    h.poll("c0", (0, 1, "b"), (0, 0, "a"))
    verdict = check(h.ops)
    assert verdict.counts()["nonmonotonic-poll"] == 1
    assert "within one poll" in verdict.anomalies["nonmonotonic-poll"].examples[0]


def test_nonmonotonic_send():
    h = H()
    h.send("p0", (0, "a", 5))
    h.send("p0", (0, "b", 3))
    found = anomalies(h)
    assert found["nonmonotonic-send"] == 1


def test_aborted_read():
    h = H()
    h.send("t0", (0, "x", 0), (1, "y", 0), type_=FAIL, txn="t0-1")
    h.poll("c0", (0, 0, "x"))
    verdict = check(h.ops)
    assert verdict.counts()["aborted-read"] == 1
    assert "value x" in verdict.anomalies["aborted-read"].examples[0]
    assert "txn=t0-1" in verdict.anomalies["aborted-read"].examples[0]


def test_torn_transaction():
    h = H()
    h.send("t0", (0, "x", 0), (1, "y", 0), txn="t0-1")
    h.send("p0", (1, "z", 2))
    h.poll("c0", (0, 0, "x"), (1, 2, "z"))
    found = anomalies(h)
    assert found["torn-transaction"] == 1
    assert found["lost-write"] == 1     # y: committed, passed, never read


def test_transaction_of_unknown_outcome_torn_too():
    h = H()
    h.send("t0", (0, "x", None), (1, "y", None), type_=INFO, txn="t0-1")
    h.poll("c0", (0, 0, "x"))
    h.drain("c0", {0: 1, 1: 1})
    assert anomalies(h) == {"torn-transaction": 1}


def test_g0_write_cycle_is_reported_and_allowed_by_default():
    h = H()
    h.send("t1", (0, "a", 0), (1, "d", 1), txn="t1")
    h.send("t2", (0, "b", 1), (1, "c", 0), txn="t2")
    verdict = check(h.ops)
    assert verdict.counts()["G0"] == 1 and verdict.valid
    assert "txn=t1" in verdict.anomalies["G0"].examples[0]
    assert not check(h.ops, allow=()).valid


def test_g1c_circular_information_flow():
    # T1 reads T2's write and T2 reads T1's: each saw the other's effects
    h = H()
    h.rw("t1", reads=[(1, 0, "b")], writes=[(0, "a", 0)], txn="t1")
    h.rw("t2", reads=[(0, 0, "a")], writes=[(1, "b", 0)], txn="t2")
    verdict = check(h.ops)
    assert verdict.counts()["G1c"] == 1
    assert not verdict.valid


def test_invoke_without_completion_is_unknown():
    h = H()
    h.ops.append(Op(0, "p0", INVOKE, "send", writes=(Write(0, "a"),)))
    assert completions(h.ops)[0].type == INFO
    assert check(h.ops).valid


def test_history_round_trips_as_json_lines():
    ops = clean().ops
    assert loads(dumps(ops)) == ops


def test_verdict_lists_every_class_and_the_seed():
    text = format_verdict(check(clean().ops), seed=42)
    for name in CLASSES:
        assert name in text
    assert "VALID" in text and "--seed 42" in text


# A valid history, generated: producers append unique values to partitions (some sends
# failed, some unknown, transactions committed or aborted), offsets assigned as a real log
# would (aborted records and markers take offsets nobody reads), consumers read contiguous
# runs of the committed log from where they were (re)assigned, and a drain reads it all.

@st.composite
def valid_histories(draw):
    partitions = draw(st.integers(1, 3))
    logs: list[list[tuple[int, str | None]]] = [[] for _ in range(partitions)]
    h = H()
    n = 0
    for _ in range(draw(st.integers(0, 25))):
        n += 1
        kind = draw(st.sampled_from(["plain", "txn", "aborted", "unknown"]))
        ps = draw(st.lists(st.integers(0, partitions - 1), min_size=1, max_size=3, unique=True))
        if kind == "plain":
            p = ps[0]
            value = f"v{n}"
            logs[p].append((len(logs[p]), value))
            h.send(f"p{draw(st.integers(0, 1))}", (p, value, logs[p][-1][0]))
        else:
            writes = []
            for i, p in enumerate(ps):
                value = f"v{n}.{i}"
                visible = kind == "txn" or (kind == "unknown" and draw(st.booleans()))
                writes.append((p, value, visible))
            committed = all(w[2] for w in writes) if kind == "unknown" else kind == "txn"
            rec = []
            for p, value, _ in writes:
                offset = len(logs[p])
                logs[p].append((offset, value if committed else None))
                rec.append((p, value, offset if kind == "txn" else None))
            for p in ps:
                logs[p].append((len(logs[p]), None))       # the control marker
            type_ = {"txn": OK, "aborted": FAIL, "unknown": INFO}[kind]
            h.send(f"t{n}", *rec, type_=type_, txn=f"t{n}")
    visible = [[(o, v) for o, v in log if v is not None] for log in logs]
    for c in range(draw(st.integers(0, 2))):
        process = f"c{c}"
        for p in range(partitions):
            if not visible[p]:
                continue
            start = draw(st.integers(0, len(visible[p]) - 1))
            stop = draw(st.integers(start, len(visible[p])))
            h.assign(process, p)
            if stop > start:
                h.poll(process, *[(p, o, v) for o, v in visible[p][start:stop]])
    for p in range(partitions):
        h.assign("drain", p)
        if visible[p]:
            h.poll("drain", *[(p, o, v) for o, v in visible[p]])
    h.drain("drain", {p: len(logs[p]) for p in range(partitions)})
    return h


@settings(max_examples=100, deadline=None)
@given(valid_histories())
def test_a_valid_history_never_reports_an_anomaly(h):
    verdict = check(h.ops, allow=())
    # G0 aside (concurrent transactions may order themselves differently per partition;
    # this generator commits them one after another, so none arises here either)
    assert verdict.valid, format_verdict(verdict)
    assert verdict.stats["unseen"] == 0


def test_faults_are_counted_once_each():
    h = clean()
    h._add("nemesis", OK, "nemesis", fault="start: kill 1.0s")
    h._add("nemesis", OK, "nemesis", fault="end: kill healed")
    assert check(h.ops).stats["faults"] == 1


def test_a_later_stage_is_checked_with_the_same_classes():
    """A pipeline stage's copy (the mirror's target, a sink's files) holds other offsets
    than the broker: stage_history drops the sends' offsets and reads the stage's content as
    one consumer's drain, so the queue classes apply to it."""
    h = H()
    h.send("sdk0", (0, "a", 0))
    h.send("sdk0", (0, "b", 1))
    h.send("sdk1", (1, "c", 0))
    h.send("txn0", (1, "x"), type_=FAIL, txn="t1")      # aborted
    clean = check(stage_history(h.ops, "mirror", [Read(0, 3, "a"), Read(0, 5, "b"),
                                                  Read(1, 2, "c")]))
    assert clean.valid, format_verdict(clean)
    bad = check(stage_history(h.ops, "mirror", [Read(0, 3, "a"), Read(0, 4, "a"),
                                                Read(1, 0, "x")]))
    assert not bad.valid
    found = {name for name, f in bad.anomalies.items() if f.count}
    assert found == {"lost-write", "duplicate", "aborted-read"}, format_verdict(bad)
    text = format_verdict(bad, label="stage verdict")
    assert "e.g. value a at p0@3, p0@4" in text and "e.g. value b" in text, text
    assert "value x read at p1@0 by stage:mirror" in text, text
    assert text.endswith("stage verdict: INVALID")
