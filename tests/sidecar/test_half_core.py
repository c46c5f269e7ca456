"""Half messages, the pure part (databus/sidecar/half/core.py): collecting a transaction's
messages, settling it by its end record, checks and the rollback after too many, commits."""

from __future__ import annotations

from collections import namedtuple

from databus.sidecar.half.core import (
    COMMIT,
    ROLLBACK,
    HalfMessage,
    HalfTracker,
    end_headers,
    half_headers,
)

Rec = namedtuple("Rec", "offset timestamp key value headers")
TP = ("databus-txn-half", 0)


def half(offset, txn, value, ts=1_000, partition=None, app=()):
    return Rec(offset, ts, b"k", value, half_headers(txn, "shop", "pay", partition, app))


def end(offset, txn, outcome):
    return Rec(offset, 9_000, None, outcome, end_headers(txn, "shop"))


def tracker():
    t = HalfTracker()
    t.assign([TP])
    return t


def test_an_end_record_settles_its_transaction_with_every_message():
    t = tracker()
    done, problems = t.add(TP, [half(0, "a", b"1", partition=2, app=[("h", b"v")]),
                                half(1, "b", b"x"), half(2, "a", b"2")])
    assert done == [] and problems == []
    assert t.safe_offsets({}) == {TP: 0}  # below the oldest open transaction
    (settled,), _ = t.add(TP, [end(3, "a", COMMIT)])
    assert settled.commit and [m.value for m in settled.messages] == [b"1", b"2"]
    assert settled.messages[0] == HalfMessage("pay", 2, b"k", b"1", (("h", b"v"),))
    assert t.safe_offsets({}) == {TP: 1}  # "b" is still open
    (settled,), _ = t.add(TP, [end(4, "b", ROLLBACK)])
    assert not settled.commit
    assert t.safe_offsets({}) == {TP: 5}


def test_a_committed_transaction_whose_writes_are_unacknowledged_holds_the_commit():
    t = tracker()
    (settled,), _ = t.add(TP, [half(3, "a", b"1"), half(4, "a", b"2"), end(5, "a", COMMIT)])
    assert settled.first_offset == 3  # where a replay must start to deliver it again
    # the shell passes, per partition, the first offset of what is not acknowledged
    assert t.safe_offsets({TP: settled.first_offset}) == {TP: 3}
    assert t.safe_offsets({("other", 0): 0}) == {TP: 6}  # only partitions read count
    t.add(TP, [half(6, "b", b"x")])
    assert t.safe_offsets({TP: 3}) == {TP: 3}  # the lower of the two


def test_only_the_first_end_counts_and_late_messages_are_dropped():
    t = tracker()
    t.add(TP, [half(0, "a", b"1"), end(1, "a", COMMIT)])
    done, problems = t.add(TP, [end(2, "a", ROLLBACK), half(3, "a", b"late"),
                                Rec(4, 0, None, b"?", ())])
    assert done == []  # several apps answered a check: the first answer won
    assert len(problems) == 2 and "after its end" in problems[0]


def test_checks_come_every_check_ms_then_a_rollback():
    t = tracker()
    t.add(TP, [half(0, "a", b"1", ts=1_000)])
    assert t.due_checks(1_499, 500, 2) == ([], [])
    checks, rollbacks = t.due_checks(1_500, 500, 2)
    assert [txn_id for txn_id, _ in checks] == ["a"] and rollbacks == []
    assert t.due_checks(1_999, 500, 2) == ([], [])
    assert len(t.due_checks(2_000, 500, 2)[0]) == 1
    checks, rollbacks = t.due_checks(2_500, 500, 2)
    assert checks == [] and [txn_id for txn_id, _ in rollbacks] == ["a"]


def test_revoked_partitions_forget_their_transactions():
    t = tracker()
    t.add(TP, [half(0, "a", b"1")])
    t.revoke([TP])
    assert t.open == {} and t.safe_offsets({}) == {}
