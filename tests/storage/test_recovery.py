"""Recovery after unclean stops and damaged files: what it does and what it says."""

import logging
import os

import pytest

from databus.protocol.records import decode_batches, iter_headers
from databus.storage.config import LogConfig

from .conftest import batch

SMALL = {"segment.bytes": "600", "index.interval.bytes": "64"}


def fill(lm, count=30, topic="t"):
    lm.open()
    lm.create_topic(topic, 1, SMALL)
    plog = lm.get_log(topic, 0)
    for i in range(count):
        plog.append(batch([b"value-%03d" % i, b"more"], ts=1000 + i))
    return plog


def crash(lm):
    """Stop without close(): no flush, no checkpoint, no clean-shutdown marker."""
    for plog in lm.logs():
        plog.delete()


def all_records(plog):
    out = []
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        batches = decode_batches(data)
        out += [(r.offset, r.value) for _h, recs in batches for r in recs]
        offset = batches[-1][0].next_offset
    return out


def logged(caplog, line, level=logging.WARNING):
    """The recovery line was logged by the storage engine at ``level``."""
    return any(r.name.startswith("databus.storage") and r.levelno == level
               and r.getMessage() == f"recovery: {line}" for r in caplog.records)


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_torn_tail_is_truncated_and_reported(manager, caplog):
    lm = manager()
    plog = fill(lm)
    plog.flush()
    lm.write_checkpoints()
    expected = all_records(plog)
    active = plog.active_segment.log_path
    good_size = os.path.getsize(active)
    partial = batch([b"never acked"])[:40]
    crash(lm)
    junk = partial + b"\x00garbage\xff" * 3
    with open(active, "ab") as f:
        f.write(junk)
    caplog.set_level(logging.INFO, logger="databus.storage")
    lm2 = manager()
    actions = lm2.open()
    plog2 = lm2.get_log("t", 0)
    assert os.path.getsize(active) == good_size
    assert plog2.log_end_offset == 60
    assert all_records(plog2) == expected
    name = os.path.basename(active)
    torn = [a for a in actions if ": truncated" in a]
    assert torn == [a for a in actions if name in a and ": truncated" in a] and len(torn) == 1
    assert f"truncated {len(junk)} bytes at position {good_size}" in torn[0]
    assert logged(caplog, torn[0])
    assert plog2.append(batch([b"next"])).first_offset == 60


def test_corrupt_batch_in_unflushed_region_truncates_from_it(manager, caplog):
    lm = manager()
    plog = fill(lm, count=10)
    plog.flush()
    lm.write_checkpoints()
    flushed = all_records(plog)
    for i in range(6):
        plog.append(batch([b"late-%d" % i], ts=5000 + i))
    seg = plog.active_segment
    positions = [(pos, h) for pos, h in iter_headers(file_bytes(seg.log_path))]
    victim_pos, victim = positions[-3]  # the 4th of the 6 unflushed batches
    assert victim.base_offset == 23
    crash(lm)
    with open(seg.log_path, "r+b") as f:
        f.seek(victim_pos + 70)
        byte = f.read(1)
        f.seek(victim_pos + 70)
        f.write(bytes([byte[0] ^ 0x55]))
    caplog.set_level(logging.INFO, logger="databus.storage")
    lm2 = manager()
    actions = lm2.open()
    plog2 = lm2.get_log("t", 0)
    assert plog2.log_end_offset == 23
    assert all_records(plog2) == flushed + [(20 + i, b"late-%d" % i) for i in range(3)]
    line, = [a for a in actions if "truncated" in a]
    assert f"at position {victim_pos}" in line and "CRC-32C" in line
    assert "the log now ends at offset 23" in line
    assert logged(caplog, line)
    assert plog2.recovery_point == 23, "recovered data is fsynced and becomes the recovery point"


def test_segments_after_a_truncated_one_are_deleted(manager):
    lm = manager()
    plog = fill(lm, count=30)
    segs = [s.log_path for s in plog.segments]
    assert len(segs) >= 4
    crash(lm)  # recovery point 0: everything is re-validated
    with open(segs[1], "r+b") as f:
        f.seek(130)  # inside the second batch's CRC-covered bytes
        f.write(b"\xde\xad")
    lm2 = manager()
    actions = lm2.open()
    plog2 = lm2.get_log("t", 0)
    assert [s.log_path for s in plog2.segments] == segs[:2]
    assert all(not os.path.exists(p) for p in segs[2:])
    assert sum("follows a truncated segment" in a for a in actions) == len(segs) - 2


@pytest.mark.parametrize("damage", ["delete", "partial-entry", "empty", "garbage"])
@pytest.mark.parametrize("which", ["index", "timeindex"])
def test_damaged_index_is_rebuilt_identically(manager, caplog, damage, which):
    lm = manager()
    plog = fill(lm)
    expected = all_records(plog)
    seg = plog.segments[1]
    path = seg.index.path if which == "index" else seg.time_index.path
    lm.close()
    original = file_bytes(path)
    assert len(original) >= 24
    if damage == "delete":
        os.unlink(path)
    elif damage == "partial-entry":
        os.truncate(path, len(original) - 3)
    elif damage == "empty":
        os.truncate(path, 0)
    else:
        with open(path, "wb") as f:
            f.write(original[12:] + original[:12])
    caplog.set_level(logging.INFO, logger="databus.storage")
    lm2 = manager()
    actions = lm2.open()
    plog2 = lm2.get_log("t", 0)
    line, = [a for a in actions if "rebuilt indexes" in a]
    assert os.path.basename(seg.log_path) in line and which in line
    assert logged(caplog, line)
    assert file_bytes(path) == original
    assert all_records(plog2) == expected
    for offset in range(plog2.log_end_offset):
        assert decode_batches(plog2.read(offset, 1))[0][0].last_offset >= offset
    lm2.close()


def test_stray_files_are_removed(manager, caplog):
    lm = manager()
    plog = fill(lm, count=5)
    directory = plog.directory
    lm.close()
    for name in ("00000000000000000999.index", "00000000000000000999.timeindex",
                 "00000000000000000000.log.cleaned", "x.tmp"):
        with open(os.path.join(directory, name), "wb") as f:
            f.write(b"junk")
    caplog.set_level(logging.INFO, logger="databus.storage")
    lm2 = manager()
    actions = lm2.open()
    assert all(logged(caplog, a, logging.INFO) for a in actions)
    for name in ("00000000000000000999.index", "00000000000000000999.timeindex",
                 "00000000000000000000.log.cleaned", "x.tmp"):
        assert not os.path.exists(os.path.join(directory, name))
        assert any(name in a for a in actions)
    assert lm2.get_log("t", 0).log_end_offset == 10


def test_clean_restart_does_no_recovery_and_keeps_state(manager):
    lm = manager()
    plog = fill(lm)
    expected = all_records(plog)
    lm.close()
    assert os.path.exists(os.path.join(lm.data_dir, ".kafka_cleanshutdown"))
    lm2 = manager()
    assert lm2.open() == []
    assert not os.path.exists(os.path.join(lm.data_dir, ".kafka_cleanshutdown"))
    plog2 = lm2.get_log("t", 0)
    assert plog2.recovery_point == plog2.log_end_offset == 60
    assert all_records(plog2) == expected
    assert plog2.config == LogConfig.from_topic_config(SMALL)


def test_recovered_segments_load_cleanly_on_the_next_start(manager):
    """A re-validated segment is sealed like a rolled one: the next clean start trusts it."""
    lm = manager()
    lm.open()
    lm.create_topic("t", 1, {"segment.bytes": "1000", "index.interval.bytes": "300"})
    plog = lm.get_log("t", 0)
    for i in range(40):
        plog.append(batch([b"v%03d" % i], ts=1000 + i))
    assert len(plog.segments) >= 3
    crash(lm)
    lm2 = manager()
    assert any("re-validated" in a for a in lm2.open())
    expected = all_records(lm2.get_log("t", 0))
    lm2.close()
    lm3 = manager()
    assert lm3.open() == []
    assert all_records(lm3.get_log("t", 0)) == expected
    assert lm3.get_log("t", 0).offset_for_timestamp(1039) == (39, 1039)
