"""Transactions in the log: open transactions, the last stable offset, aborted transactions,
fencing by a marker's epoch, and all of it rebuilt after clean and unclean restarts."""

from __future__ import annotations

import struct

import crc32c
import msgpack
import pytest

from databus.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from databus.storage.errors import InvalidProducerEpochError, InvalidRecordError
from databus.storage.producer_state import AbortedTxn, ProducerStateManager

from .conftest import batch


def txn(n: int, seq: int, *, pid: int, epoch: int = 0) -> bytes:
    return batch([b"t%d" % i for i in range(n)], producer_id=pid, producer_epoch=epoch,
                 base_sequence=seq, transactional=True)


def marker(pid: int, kind: int, epoch: int = 0) -> bytes:
    return build_control_batch(pid, epoch, kind, timestamp=1_000)


def test_open_transactions_hold_the_last_stable_offset_and_aborts_are_remembered(open_log):
    plog = open_log()
    plog.append(batch([b"plain"]))                     # 0
    plog.append(txn(2, 0, pid=7))                      # 1-2   pid 7 opens at 1
    plog.append(txn(1, 0, pid=8))                      # 3     pid 8 opens at 3
    assert plog.last_stable_offset == 1 and plog.log_end_offset == 4
    plog.append(marker(7, CONTROL_ABORT), allow_control=True)  # 4: pid 7 aborted [1, 4]
    assert plog.last_stable_offset == 3
    plog.append(txn(1, 1, pid=8))                      # 5
    plog.append(marker(8, CONTROL_COMMIT), allow_control=True)  # 6
    assert plog.last_stable_offset == plog.log_end_offset == 7
    assert plog.aborted_transactions(0, 7) == [AbortedTxn(7, 1, 4)]
    assert plog.aborted_transactions(5, 7) == []          # marker before the read
    assert plog.aborted_transactions(0, 1) == []          # read ends before the txn
    # a marker for a producer with nothing open changes nothing (a retried marker)
    plog.append(marker(7, CONTROL_ABORT), allow_control=True)
    assert plog.aborted_transactions(0, 100) == [AbortedTxn(7, 1, 4)]


def test_only_the_broker_writes_markers(open_log):
    plog = open_log()
    with pytest.raises(InvalidRecordError, match="written by the broker only"):
        plog.append(marker(7, CONTROL_COMMIT))
    assert plog.log_end_offset == 0


def test_a_marker_with_a_bumped_epoch_fences_the_old_producer(open_log):
    plog = open_log()
    plog.append(txn(1, 0, pid=3, epoch=0))
    plog.append(marker(3, CONTROL_ABORT, epoch=1), allow_control=True)
    with pytest.raises(InvalidProducerEpochError):
        plog.append(txn(1, 1, pid=3, epoch=0))
    # the new instance (epoch 1) starts its sequence at 0
    assert plog.append(txn(1, 0, pid=3, epoch=1)).first_offset == 2


@pytest.mark.parametrize("clean", [True, False])
def test_transaction_state_survives_restarts(open_log, clean):
    plog = open_log(segment_bytes=400)
    for i in range(6):  # several segments: snapshots at rolls, replay after them
        plog.append(txn(2, 2 * i, pid=1))
    plog.append(marker(1, CONTROL_ABORT), allow_control=True)   # aborted [0, 12]
    plog.append(txn(1, 0, pid=2))                                # 13, left open
    expected = (plog.aborted_transactions(0, 100), plog.last_stable_offset)
    assert expected == ([AbortedTxn(1, 0, 12)], 13)
    if clean:
        plog.close()
    else:
        plog.delete()  # no close: recovery replays the headers after the newest snapshot
    reopened = open_log(clean=clean, segment_bytes=400)
    assert (reopened.aborted_transactions(0, 100), reopened.last_stable_offset) == expected
    reopened.append(marker(2, CONTROL_COMMIT), allow_control=True)
    assert reopened.last_stable_offset == reopened.log_end_offset


def test_retention_forgets_aborted_transactions_below_the_log_start():
    state = ProducerStateManager()
    state.aborted = [AbortedTxn(1, 0, 4), AbortedTxn(2, 5, 9), AbortedTxn(3, 2, 12)]
    state.drop_aborted_before(9)
    assert state.aborted == [AbortedTxn(2, 5, 9), AbortedTxn(3, 2, 12)]


def test_snapshot_v2_round_trip_and_v1_still_loads():
    state = ProducerStateManager()
    state.update(1, 2, 0, 4, 10, 14, 99)
    state.ongoing = {1: 10}
    state.aborted = [AbortedTxn(4, 1, 3)]
    loaded = ProducerStateManager.load_snapshot(state.snapshot_bytes())
    assert (loaded.ongoing, loaded.aborted) == ({1: 10}, [AbortedTxn(4, 1, 3)])
    assert list(loaded.entry(1).batches) == list(state.entry(1).batches)
    # a version 1 snapshot (written before transactions) is read as having none
    body = msgpack.packb([[1, 2, 99, [[0, 4, 10, 14]]]])
    v1 = struct.pack(">4sHI", b"DBPS", 1, crc32c.crc32c(body)) + body
    old = ProducerStateManager.load_snapshot(v1)
    assert old.entry(1).epoch == 2 and old.ongoing == {} and old.aborted == []

