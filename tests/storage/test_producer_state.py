import os

import pytest

from databus.storage.errors import (
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    kafka_error_code,
)
from databus.storage.producer_state import (
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
    check_sequence,
)

from .conftest import batch


def idem(n, seq, pid=7, epoch=0, **kw):
    return batch([b"r"] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def test_check_sequence_rules():
    entry = ProducerEntry(epoch=3)
    entry.batches.append(BatchMetadata(0, 4, 100, 104))
    entry.batches.append(BatchMetadata(5, 9, 105, 109))
    assert check_sequence(None, 1, 0, 42, 50) is None, "unknown producer: any sequence"
    assert check_sequence(entry, 1, 3, 10, 12) is None
    assert check_sequence(entry, 1, 3, 5, 9) == BatchMetadata(5, 9, 105, 109)
    with pytest.raises(OutOfOrderSequenceError, match="sequence 11 does not follow .* 9"):
        check_sequence(entry, 1, 3, 11, 12)
    with pytest.raises(InvalidProducerEpochError, match="epoch 2, older than its current epoch 3") as e:
        check_sequence(entry, 1, 2, 10, 12)
    assert kafka_error_code(e.value) == 47
    assert check_sequence(entry, 1, 4, 0, 3) is None
    with pytest.raises(OutOfOrderSequenceError, match="new epoch 4 must start at sequence 0"):
        check_sequence(entry, 1, 4, 10, 12)
    wrapped = ProducerEntry(epoch=0)
    wrapped.batches.append(BatchMetadata(2**31 - 3, 2**31 - 1, 0, 2))
    assert check_sequence(wrapped, 1, 0, 0, 1) is None
    assert check_sequence(entry, -1, 0, 99, 99) is None, "non-idempotent batches are not checked"


def test_append_dedups_and_rejects_gaps(open_log):
    plog = open_log()
    first = plog.append(idem(3, 0))
    assert (first.first_offset, first.last_offset, first.duplicate) == (0, 2, False)
    plog.append(batch([b"plain"]))
    dup = plog.append(idem(3, 0))
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 2)
    assert plog.log_end_offset == 4
    with pytest.raises(OutOfOrderSequenceError) as exc:
        plog.append(idem(1, 5))
    assert kafka_error_code(exc.value) == 45
    with pytest.raises(OutOfOrderSequenceError):  # second batch of the request has the gap
        plog.append(idem(1, 3) + idem(1, 9))
    assert plog.log_end_offset == 4
    info = plog.append(idem(1, 3) + idem(2, 4))
    assert (info.first_offset, info.last_offset) == (4, 6)
    assert plog.check_producer(idem(2, 4)) == BatchMetadata(4, 5, 5, 6)
    assert plog.check_producer(idem(1, 6)) is None
    entry = plog.producer_state.entry(7)
    assert [m.first_seq for m in entry.batches] == [0, 3, 4]


def test_only_last_five_batches_are_remembered(open_log):
    plog = open_log()
    for i in range(7):
        plog.append(idem(1, i))
    assert plog.append(idem(1, 2)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        plog.append(idem(1, 1))  # fell out of the 5-batch window: no longer a duplicate


def test_state_survives_clean_and_unclean_restarts(open_log):
    plog = open_log(segment_bytes=300)
    for i in range(10):
        plog.append(idem(2, 2 * i, pid=5, epoch=1))
    plog.append(idem(1, 0, pid=6, epoch=0))
    plog.close()
    reopened = open_log(segment_bytes=300)  # clean: the close-time snapshot is loaded
    assert reopened.append(idem(2, 18, pid=5, epoch=1)).duplicate
    reopened.append(idem(1, 20, pid=5, epoch=1))
    reopened.delete()  # crash: no close-time snapshot; replay headers after the last one
    snapshots = sorted(n for n in os.listdir(reopened.directory) if n.endswith(".snapshot"))
    os.unlink(os.path.join(reopened.directory, snapshots[-1]))  # and lose the newest
    crashed = open_log(clean=False, segment_bytes=300)
    dup = crashed.append(idem(1, 20, pid=5, epoch=1))
    assert dup.duplicate and dup.first_offset == 21
    with pytest.raises(InvalidProducerEpochError):
        crashed.append(idem(1, 21, pid=5, epoch=0))
    assert crashed.append(idem(1, 1, pid=6, epoch=0)).first_offset == 22


def test_snapshot_round_trip_and_damage():
    state = ProducerStateManager()
    state.update(1, 2, 0, 4, 10, 14, 99)
    state.update(1, 2, 5, 5, 20, 20, 100)
    data = state.snapshot_bytes()
    loaded = ProducerStateManager.load_snapshot(data)
    assert loaded.entry(1).epoch == 2 and list(loaded.entry(1).batches) == list(state.entry(1).batches)
    with pytest.raises(ValueError, match="CRC"):
        ProducerStateManager.load_snapshot(data[:-1] + bytes([data[-1] ^ 1]))
