"""On-disk formats: index and time index entries, checkpoints, partition.metadata."""

import os
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.storage.checkpoints import (
    CheckpointError,
    format_checkpoint,
    parse_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from databus.storage.offset_index import OffsetIndex
from databus.storage.time_index import TimeIndex
from databus.storage.topic_metadata import (
    decode_topic_id,
    encode_topic_id,
    read_partition_metadata,
    write_partition_metadata,
)

from .conftest import batch


def test_index_files_hold_kafkas_entries(open_log):
    plog = open_log(index_interval_bytes=100)
    sizes = []
    for i in range(4):
        b = batch([b"x" * 60, b"y"], ts=1000 * (i + 1))
        sizes.append(len(b))
        plog.append(b)
    seg = plog.active_segment
    # Kafka's cadence: an entry before a batch once > 100 bytes were written since the last
    # one; the entry holds the batch's LAST offset (relative) and its position.
    p1, p2, p3 = sizes[0], sizes[0] + sizes[1], sum(sizes[:3])
    with open(seg.index.path, "rb") as f:
        assert f.read() == struct.pack(">IIIIII", 3, p1, 5, p2, 7, p3)
    with open(seg.time_index.path, "rb") as f:
        assert f.read() == struct.pack(">qIqIqI", 2001, 3, 3001, 5, 4001, 7)
    plog.close()
    with open(seg.time_index.path, "rb") as f:  # closing adds nothing: 4001 is the max
        assert len(f.read()) == 36


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 50), min_size=0, max_size=40), st.integers(0, 2500))
def test_offset_index_lookup_matches_a_sorted_map(tmp_path_factory, gaps, target):
    path = str(tmp_path_factory.mktemp("idx") / "0.index")
    idx = OffsetIndex(path, base_offset=100)
    idx.open(create=True)
    try:
        pos = 0
        entries = []
        rel = 0
        for gap in gaps:
            rel += gap
            pos += gap * 10
            entries.append((rel, pos))
        idx.write(entries)
        oracle = {100 + r: p for r, p in entries}
        below = [o for o in oracle if o <= target]
        expected = oracle[max(below)] if below else 0
        assert idx.lookup(target)[1] == expected
        assert idx.read_entries() is None and list(idx.keys) == [r for r, _ in entries]
    finally:
        idx.close()


def test_time_index_lookup_is_strictly_before(tmp_path):
    idx = TimeIndex(str(tmp_path / "0.timeindex"), base_offset=10)
    idx.open(create=True)
    idx.write([(100, 0), (200, 5), (300, 9)])
    assert idx.lookup(50) == 10
    assert idx.lookup(100) == 10
    assert idx.lookup(101) == 10
    assert idx.lookup(201) == 15
    assert idx.lookup(10**9) == 19
    assert idx.maybe_entry(300, 25) is None and idx.maybe_entry(301, 25) == (301, 15)
    idx.close()


def test_checkpoint_golden_format_and_round_trip(tmp_path):
    entries = {("orders", 1): 42, ("orders", 0): 7, ("__consumer_offsets", 3): 0}
    assert format_checkpoint(entries) == (
        b"0\n3\n__consumer_offsets 3 0\norders 0 7\norders 1 42\n")
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(path, entries)
    assert read_checkpoint(path) == entries
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()
    assert read_checkpoint(tmp_path / "missing") == {}


@pytest.mark.parametrize("text,fragment", [
    ("1\n0\n", "unsupported version"),
    ("0\n2\nt 0 1\n", "announces 2 entries but holds 1"),
    ("0\n1\nt x 1\n", "line 3"),
    ("0\n", "count line"),
])
def test_damaged_checkpoint_is_reported(text, fragment):
    with pytest.raises(CheckpointError, match=fragment):
        parse_checkpoint(text, "cp")


def test_partition_metadata_uses_kafkas_topic_id_text(tmp_path):
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    assert encode_topic_id(topic_id) == "ASNFZ4mrze8BI0VniavN7w"
    assert decode_topic_id("ASNFZ4mrze8BI0VniavN7w") == topic_id
    write_partition_metadata(str(tmp_path), topic_id)
    assert (tmp_path / "partition.metadata").read_text() == (
        "version: 0\ntopic_id: ASNFZ4mrze8BI0VniavN7w\n")
    assert read_partition_metadata(str(tmp_path)) == topic_id
    os.unlink(tmp_path / "partition.metadata")
    assert read_partition_metadata(str(tmp_path)) is None
