"""``databus dump-log`` on real segment files: batch lines, records, escaping, and damaged
files reported without a traceback and with a non-zero exit."""

import struct

import pytest

from databus.cli import main
from databus.protocol.records import (
    CODEC_LZ4,
    CODEC_ZSTD,
    CONTROL_COMMIT,
    build_batch,
    set_base_offset,
)

TS = 1_700_000_000_000


@pytest.fixture
def segment(tmp_path):
    first = build_batch(
        [
            (b"k1", b"hello", (("trace", b"t-1"), ("none", None)), TS),
            (None, b"\xff\x00bin\nary\\", (), TS + 7),
            (b"tomb", None, (), TS + 3),
        ],
        codec=CODEC_LZ4,
        producer_id=4000,
        producer_epoch=2,
        base_sequence=10,
        partition_leader_epoch=0,
    )
    second = bytearray(
        build_batch([("é".encode(), b"\xe2\x82\xac", (), TS + 20)], codec=CODEC_ZSTD)
    )
    set_base_offset(second, 0, 3)
    marker = bytearray(
        build_batch(
            [(struct.pack(">hh", 0, CONTROL_COMMIT), struct.pack(">hi", 0, 6), (), TS + 30)],
            control=True,
            transactional=True,
            producer_id=4000,
            producer_epoch=2,
        )
    )
    set_base_offset(marker, 0, 4)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(first + second + marker)
    return path, [len(first), len(second), len(marker)]


def test_one_line_per_batch(segment, capsys):
    path, sizes = segment
    assert main(["dump-log", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert lines[1] == "Log starting offset: 0"
    batches = lines[2:]
    assert len(batches) == 3
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 2 count: 3 baseSequence: 10 lastSequence: 12"
        " producerId: 4000 producerEpoch: 2 partitionLeaderEpoch: 0"
        " isTransactional: false isControl: false position: 0 CreateTime"
        f" baseTimestamp: {TS} maxTimestamp: {TS + 7} size: {sizes[0]} magic: 2"
        " compresscodec: lz4 crc: "
    )
    assert batches[0].endswith(" isvalid: true")
    assert "baseOffset: 3 lastOffset: 3 count: 1" in batches[1]
    assert f"position: {sizes[0]} " in batches[1] and "compresscodec: zstd" in batches[1]
    assert "isTransactional: true isControl: true" in batches[2]


def test_print_records(segment, capsys):
    path, _ = segment
    assert main(["dump-log", "--print-records", str(path)]) == 0
    records = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert records == [
        (
            f"| offset: 0 CreateTime: {TS} keySize: 2 valueSize: 5 sequence: 10"
            " headers: [trace=t-1, none=null] key: k1 payload: hello"
        ),
        (
            f"| offset: 1 CreateTime: {TS + 7} keySize: -1 valueSize: 10 sequence: 11"
            " headers: [] key: null payload: \\xff\\x00bin\\nary\\\\"
        ),
        (
            f"| offset: 2 CreateTime: {TS + 3} keySize: 4 valueSize: -1 sequence: 12"
            " headers: [] key: tomb payload: null"
        ),
        (
            f"| offset: 3 CreateTime: {TS + 20} keySize: 2 valueSize: 3 sequence: -1"
            " headers: [] key: é payload: €"
        ),
        (
            f"| offset: 4 CreateTime: {TS + 30} keySize: 4 valueSize: 6 sequence: -1"
            " headers: [] endTxnMarker: COMMIT coordinatorEpoch: 6"
        ),
    ]


@pytest.mark.parametrize("cut", [1, 30, 61, 70])
def test_torn_tail_is_reported_and_exits_non_zero(segment, capsys, cut):
    path, sizes = segment
    data = path.read_bytes()
    path.write_bytes(data[: sum(sizes[:2]) + cut])
    assert main(["dump-log", "--print-records", str(path)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[-1].startswith(f"torn batch at position {sum(sizes[:2])}: ")
    assert sum(line.startswith("baseOffset:") for line in lines) == 2
    assert "Traceback" not in out


def test_garbage_tail_is_reported(segment, capsys):
    path, sizes = segment
    with open(path, "ab") as f:
        f.write(b"\x00" * 12 + b"\xff" * 60)
    assert main(["dump-log", str(path)]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith(f"torn batch at position {sum(sizes)}: ")


def test_crc_mismatch_is_flagged_and_the_dump_continues(segment, capsys):
    path, sizes = segment
    data = bytearray(path.read_bytes())
    data[sizes[0] - 1] ^= 0xFF  # last byte of the first batch
    path.write_bytes(data)
    assert main(["dump-log", "--print-records", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert [b.endswith("isvalid: false") for b in batches] == [True, False, False]
    assert any(
        line.startswith("| cannot decode the records of the batch at position 0") for line in lines
    )


def test_empty_and_missing_files(tmp_path, capsys):
    empty = tmp_path / "00000000000000000042.log"
    empty.write_bytes(b"")
    assert main(["dump-log", str(empty)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"Dumping {empty}", "Log starting offset: 42"]
    assert main(["dump-log", str(tmp_path / "missing.log")]) == 1
    assert "cannot read" in capsys.readouterr().out


def test_index_and_time_index_files(tmp_path, capsys):
    index = tmp_path / "00000000000000000100.index"
    index.write_bytes(struct.pack(">IIII", 0, 0, 40, 4096) + b"\x00" * 16)
    timeindex = tmp_path / "00000000000000000100.timeindex"
    timeindex.write_bytes(struct.pack(">qI", TS, 0) + struct.pack(">qI", TS + 9, 40) + b"\x01")
    assert main(["dump-log", str(index), str(timeindex)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"Dumping {index}",
        "offset: 100 position: 0",
        "offset: 140 position: 4096",
        f"Dumping {timeindex}",
        f"timestamp: {TS} offset: 100",
        f"timestamp: {TS + 9} offset: 140",
        "torn entry at position 24: 1 bytes, an entry has 12",
    ]
