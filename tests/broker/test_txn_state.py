"""The transaction coordinator's state machine (databus/broker/txn/state.py) without I/O, and
the ``__transaction_state`` record layout (Kafka's TransactionLogKey/Value v0), in golden bytes."""

from __future__ import annotations

import itertools

import pytest

from databus.broker.txn.state import MAX_EPOCH, TransactionCoordinator, TxnMetadata, TxnState
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.transaction_state import (
    TxnStateRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

TIMEOUT = 60_000


def applied(coordinator, plan):
    """Apply a plan as the service does once its records are durable."""
    assert plan.error == ErrorCode.none, plan.error
    for meta in (plan.prepare, plan.complete):
        if meta is not None:
            coordinator.applied(meta)
    return plan


@pytest.fixture
def coordinator():
    return TransactionCoordinator(max_timeout_ms=900_000)


@pytest.fixture
def ids():
    counter = itertools.count(100)
    return lambda: next(counter)


def init(coordinator, ids, txn="t", now=0, pid=-1, epoch=-1):
    return applied(coordinator, coordinator.init_producer_id(txn, TIMEOUT, pid, epoch, now, ids))


def test_a_transaction_commits_through_prepare_and_complete(coordinator, ids):
    meta = init(coordinator, ids).result
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (100, 0, TxnState.EMPTY)
    plan = applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 5))
    assert plan.complete.state is TxnState.ONGOING and plan.complete.start_ms == 5
    # adding what is there already writes nothing
    assert coordinator.add_partitions("t", 100, 0, [("a", 0)], 6).result is None
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("b", 1)], 7))
    plan = coordinator.end_txn("t", 100, 0, True, 9)
    assert plan.prepare.state is TxnState.PREPARE_COMMIT
    assert plan.prepare.partitions == {("a", 0), ("b", 1)}  # the markers go there
    assert plan.complete.state is TxnState.COMPLETE_COMMIT and not plan.complete.partitions
    applied(coordinator, plan)
    # a retried EndTxn (its answer was lost) succeeds; the opposite outcome does not
    assert coordinator.end_txn("t", 100, 0, True, 10).error == ErrorCode.none
    assert coordinator.end_txn("t", 100, 0, False, 10).error == ErrorCode.invalid_txn_state


def test_requests_while_a_plan_runs_are_concurrent_transactions(coordinator, ids):
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 0))
    coordinator.pending.add("t")
    assert coordinator.end_txn("t", 100, 0, True, 1).error == ErrorCode.concurrent_transactions
    assert (coordinator.add_partitions("t", 100, 0, [("b", 0)], 1).error
            == ErrorCode.concurrent_transactions)


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(coordinator, ids):
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 0))
    plan = coordinator.init_producer_id("t", TIMEOUT, -1, -1, 1, ids)
    # the open transaction is aborted under the bumped epoch, which the new instance gets
    assert plan.prepare.state is TxnState.PREPARE_ABORT and plan.prepare.producer_epoch == 1
    assert plan.prepare.partitions == {("a", 0)}
    assert (plan.result.producer_id, plan.result.producer_epoch) == (100, 1)
    applied(coordinator, plan)
    assert coordinator.end_txn("t", 100, 0, True, 2).error == ErrorCode.producer_fenced
    assert (coordinator.add_partitions("t", 100, 0, [("a", 0)], 2).error
            == ErrorCode.producer_fenced)
    assert (coordinator.add_partitions("t", 999, 1, [("a", 0)], 2).error
            == ErrorCode.invalid_producer_id_mapping)
    # KIP-360: re-initialising with a stale epoch is fenced too
    assert coordinator.init_producer_id("t", TIMEOUT, 100, 0, 3, ids).error == (
        ErrorCode.producer_fenced)


def test_the_epoch_never_overflows(coordinator, ids):
    coordinator.applied(TxnMetadata("t", 100, MAX_EPOCH - 1, TIMEOUT, TxnState.EMPTY))
    meta = init(coordinator, ids).result
    assert (meta.producer_id, meta.producer_epoch) == (100, 0)


def test_timeouts_bounds_and_timed_out_transactions(coordinator, ids):
    assert coordinator.init_producer_id("t", 900_001, -1, -1, 0, ids).error == (
        ErrorCode.invalid_transaction_timeout)
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 1_000))
    assert coordinator.timed_out(1_000 + TIMEOUT - 1) == []
    assert coordinator.timed_out(1_000 + TIMEOUT) == ["t"]
    plan = coordinator.abort_timed_out("t", 1_000 + TIMEOUT)
    assert plan.prepare.state is TxnState.PREPARE_ABORT and plan.prepare.producer_epoch == 1
    applied(coordinator, plan)
    assert coordinator.end_txn("t", 100, 0, True, 2).error == ErrorCode.producer_fenced


def test_a_transaction_begun_before_the_clock_went_back_still_times_out(coordinator, ids):
    """Found by `databus verify`'s clock fault: a transaction begun while the broker's wall
    clock ran 2 h ahead, then the broker restarted on the real clock.  Measured from its
    start in the future it would stay open 2 h longer than its timeout, holding back every
    read_committed consumer of its partitions; its timeout counts from when the coordinator
    first sees the clock behind its start instead."""
    ahead = 2 * 3600 * 1000
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 1_000 + ahead))
    assert coordinator.timed_out(1_000) == []              # the clock went back 2 h
    assert coordinator.timed_out(1_000 + TIMEOUT - 1) == []
    assert coordinator.timed_out(1_000 + TIMEOUT) == ["t"]
    assert coordinator.abort_timed_out("t", 1_000 + TIMEOUT).prepare.state is (
        TxnState.PREPARE_ABORT)


def test_a_transaction_caught_in_prepare_is_finished_after_a_restart(coordinator):
    prepared = TxnMetadata("t", 7, 3, TIMEOUT, TxnState.PREPARE_COMMIT,
                           frozenset({("a", 1)}), 10, 20)
    done = TxnMetadata("u", 8, 0, TIMEOUT, TxnState.COMPLETE_ABORT)
    (plan,) = coordinator.load([prepared, done])
    assert plan.prepare == prepared
    assert plan.complete.state is TxnState.COMPLETE_COMMIT and plan.complete.producer_epoch == 3


def test_offset_commits_need_the_group_in_the_transaction(coordinator, ids):
    init(coordinator, ids)
    group = ("__consumer_offsets", 4)
    assert coordinator.check_offset_commit("t", 100, 0, group) == ErrorCode.invalid_txn_state
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [group], 0))
    assert coordinator.check_offset_commit("t", 100, 0, group) == ErrorCode.none
    assert coordinator.check_offset_commit("t", 100, 1, group) == ErrorCode.producer_fenced


# -- __transaction_state records: golden bytes ----------------------------------------------

KEY = bytes.fromhex("0000" "0003") + b"app"
VALUE = bytes.fromhex(
    "0000"                      # version 0
    "0000000000000064"          # producer id 100
    "0002"                      # epoch 2
    "0000ea60"                  # timeout 60000
    "01"                        # state ONGOING
    "00000002"                  # 2 topics
    "0001" "61" "00000002" "00000000" "00000003"   # a: 0, 3
    "0001" "62" "00000001" "00000001"              # b: 1
    "0000000000000014"          # last update 20
    "000000000000000a"          # start 10
)


def test_state_records_golden_bytes():
    meta = TxnMetadata("app", 100, 2, 60_000, TxnState.ONGOING,
                       frozenset({("b", 1), ("a", 3), ("a", 0)}), start_ms=10, update_ms=20)
    assert encode_key("app") == KEY
    assert encode_value(meta) == VALUE
    assert decode_key(KEY) == "app"
    assert decode_value("app", VALUE) == meta


def test_damaged_state_records_are_named():
    with pytest.raises(TxnStateRecordError, match="unknown version 5"):
        decode_key(b"\x00\x05\x00\x01a")
    with pytest.raises(TxnStateRecordError, match="unknown state 9"):
        decode_value("app", VALUE[:16] + b"\x09" + VALUE[17:])


def test_a_failed_write_leaves_a_plan_to_finish_later(coordinator, ids):
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 0))
    plan = coordinator.end_txn("t", 100, 0, True, 1)
    coordinator.applied(plan.prepare)  # prepared, then the marker write failed
    assert coordinator.end_txn("t", 100, 0, True, 2).error == ErrorCode.concurrent_transactions
    (retry,) = coordinator.unfinished()
    assert retry.prepare == plan.prepare and retry.complete.state is TxnState.COMPLETE_COMMIT
    coordinator.pending.add("t")
    assert coordinator.unfinished() == []  # not while a plan for it runs


# -- transactions v2 (KIP-890) -------------------------------------------------------------


def test_v2_every_end_txn_bumps_the_epoch_and_markers_carry_it(coordinator, ids):
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 1))
    plan = applied(coordinator, coordinator.end_txn("t", 100, 0, True, 2, v2=True,
                                                    new_producer_id=ids))
    # the COMMIT markers are written with the bumped epoch: a late batch of epoch 0 is fenced
    assert (plan.prepare.producer_epoch, plan.prepare.state) == (1, TxnState.PREPARE_COMMIT)
    assert plan.prepare.partitions == {("a", 0)}
    assert (plan.result.producer_id, plan.result.producer_epoch) == (100, 1)
    # the old epoch is fenced for the next transaction; the new one goes on
    assert coordinator.add_partitions("t", 100, 0, [("a", 0)], 3).error == \
        ErrorCode.producer_fenced
    applied(coordinator, coordinator.add_partitions("t", 100, 1, [("a", 0)], 3))
    plan = applied(coordinator, coordinator.end_txn("t", 100, 1, False, 4, v2=True,
                                                    new_producer_id=ids))
    assert plan.prepare.state is TxnState.PREPARE_ABORT and plan.result.producer_epoch == 2


def test_v2_a_retried_end_txn_gets_the_same_answer_and_writes_nothing(coordinator, ids):
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 1))
    applied(coordinator, coordinator.end_txn("t", 100, 0, True, 2, v2=True,
                                             new_producer_id=ids))
    retry = coordinator.end_txn("t", 100, 0, True, 3, v2=True, new_producer_id=ids)
    assert retry.error == ErrorCode.none and retry.prepare is None and retry.complete is None
    assert (retry.result.producer_id, retry.result.producer_epoch) == (100, 1)
    # not a retry: the other outcome, or an epoch from further back
    assert coordinator.end_txn("t", 100, 0, False, 3, v2=True,
                               new_producer_id=ids).error == ErrorCode.producer_fenced
    # nothing added: committing is refused, aborting bumps (an empty transaction)
    assert coordinator.end_txn("t", 100, 1, True, 4, v2=True,
                               new_producer_id=ids).error == ErrorCode.invalid_txn_state
    plan = applied(coordinator, coordinator.end_txn("t", 100, 1, False, 4, v2=True,
                                                    new_producer_id=ids))
    assert plan.prepare.partitions == frozenset() and plan.result.producer_epoch == 2


def test_v2_an_epoch_overflow_hands_out_a_new_producer_id(coordinator, ids):
    init(coordinator, ids)
    last = MAX_EPOCH - 2
    coordinator.applied(TxnMetadata("t", 100, last, TIMEOUT, TxnState.ONGOING,
                                    frozenset({("a", 0)}), 1, 1))
    plan = applied(coordinator, coordinator.end_txn("t", 100, last, True, 2, v2=True,
                                                    new_producer_id=ids))
    assert (plan.prepare.producer_id, plan.prepare.producer_epoch) == (100, MAX_EPOCH - 1)
    assert (plan.result.producer_id, plan.result.producer_epoch) == (101, 0)
    # its retry names the old id and still gets the new one
    retry = coordinator.end_txn("t", 100, last, True, 3, v2=True, new_producer_id=ids)
    assert (retry.error, retry.result.producer_id, retry.result.producer_epoch) == (
        ErrorCode.none, 101, 0)


def test_v1_end_txn_is_unchanged_beside_v2(coordinator, ids):
    init(coordinator, ids)
    applied(coordinator, coordinator.add_partitions("t", 100, 0, [("a", 0)], 1))
    plan = applied(coordinator, coordinator.end_txn("t", 100, 0, True, 2))
    assert plan.prepare.producer_epoch == 0 and plan.result.producer_epoch == 0
