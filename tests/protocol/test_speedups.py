"""The C extension (databus.protocol._speedups) against its pure-Python twin.

Both implementations run in this one process: ``records.use_native`` switches the record
code between them, so each check runs a kernel on the extension and on None (the
pure-Python code) and compares byte-for-byte encodings, equal decoded objects, and for
malformed input the same exception type and message (the C code must never crash on
hostile bytes: random and mutated payloads go through it here).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import struct
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from databus.client import partitioners
from databus.client.fetcher import ConsumerRecord
from databus.protocol import records, speedups
from databus.protocol.columns import ColumnBuffers
from databus.protocol.records import (
    HEADER_SIZE,
    BatchBuilder,
    BatchHeader,
    build_batch,
    decode_columns,
    decode_consumer_records,
    decode_records,
    parse_header,
)
from databus.protocol.varint import VarintError, decode_zigzag, encode_zigzag
from tests.helpers.blocked_import import python_without

try:
    from databus.protocol import _speedups
except ImportError:  # reported by test_the_extension_is_built_where_a_compiler_is
    _speedups = None

needs_ext = pytest.mark.skipif(
    _speedups is None, reason="the C extension is not built here (no C compiler at install)"
)


def test_the_extension_is_built_where_a_compiler_is():
    """`pip install` on a machine with a C compiler must build it: a silently failed build
    would otherwise turn every comparison below into a skip."""
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler on this machine: the pure-Python fallback is expected")
    assert _speedups is not None, "C compiler present but databus.protocol._speedups missing"
    # and each part's own extension (setup.py's EXTENSIONS), beside the code it serves
    for module in ("databus.protocol._sidecar_speedups", "databus.client._producer_speedups",
                   "databus.sdk._outbox_speedups", "databus.sidecar.produce._router_speedups",
                   "databus_plugins.index._json_speedups"):
        assert importlib.util.find_spec(module) is not None, f"C compiler present but {module} missing"


def test_the_environment_variable_forces_the_pure_python_code():
    assert speedups.load_native({"DATABUS_PURE_PYTHON": "1"}) is None
    assert speedups.load_native({"DATABUS_PURE_PYTHON": "0"}) is _speedups
    assert speedups.load_native({}) is _speedups


def test_a_process_without_the_extension_runs_the_pure_python_code():
    """The fallback import path, as a machine without a compiler meets it: the extension
    module cannot be imported (here: blocked by a meta-path finder) and everything runs."""
    out = python_without("databus.protocol._speedups", (
        "from databus.protocol import speedups, records\n"
        "from databus.client.partitioners import murmur2, murmur2_py\n"
        "assert murmur2 is murmur2_py\n"
        "b = records.build_batch([(b'k', b'v', (), 5)])\n"
        "print(speedups.implementation(), records.decode_records(b)[1])\n"
    ))
    assert out.strip() == "pure Python [Record(offset=0, timestamp=5, key=b'k', value=b'v', headers=())]"


def run_both(fn):
    """(C outcome, Python outcome): a value, or the exception's type and message."""
    outcomes = []
    saved = records._native
    try:
        for impl in (_speedups, None):
            records.use_native(impl)
            try:
                outcomes.append(("ok", fn()))
            except Exception as exc:  # noqa: BLE001 - the comparison is the point
                outcomes.append((type(exc), str(exc)))
    finally:
        records.use_native(saved)
    return outcomes


# -- encode ---------------------------------------------------------------------------------

header_st = st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8)))
payload_st = st.one_of(st.none(), st.binary(max_size=300))
timestamp_st = st.one_of(
    st.integers(0, 2**42),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**70), 2**70),  # beyond int64: left to the Python loop
)
record_st = st.tuples(
    timestamp_st,
    payload_st,
    payload_st,
    st.one_of(st.just(()), st.none(), st.lists(header_st, max_size=3).map(tuple)),
)


@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runs=st.lists(st.lists(record_st, max_size=12), min_size=1, max_size=4),
    batch_size=st.integers(61, 3000),
)
def test_append_many_encodes_byte_identical_batches(runs, batch_size):
    def encode():
        builder = BatchBuilder(batch_size=batch_size)
        stops = [builder.append_many(run) for run in runs]
        try:
            built = builder.build()
        except struct.error as exc:  # a first timestamp beyond int64: both fail the header
            built = ("struct.error", str(exc))
        return stops, builder.uncompressed_size, builder.record_count, built

    c, py = run_both(encode)
    assert c == py


@needs_ext
def test_append_many_odd_inputs_take_the_python_path():
    """Inputs the C loop leaves to Python keep Python's behaviour exactly."""
    cases = [
        [(1, bytearray(b"k"), b"v", ())],  # a key that is not bytes
        [(1, None, memoryview(b"v"), ())],
        [(1, None, b"v", [("h", bytearray(b"x"))])],
        [(1, None, b"v", (("h", b"x"),)), (2.5, None, b"v", ())],  # a float timestamp
        [(1, None, b"v", ((b"not str", b"x"),))],
        [(1, None, b"v", (("\ud800", b"x"),))],  # a lone surrogate in a header name
        [(1, None, b"v", ()), [2, None, b"w", ()]],  # a list, not a tuple
    ]
    for run in cases:
        def encode(run=run):
            builder = BatchBuilder()
            return builder.append_many(run), builder.build()

        c, py = run_both(encode)
        assert c == py, run


@needs_ext
def test_append_many_stops_at_batch_size_in_both():
    run = [(1700000000000 + i, None, bytes(100), ()) for i in range(400)]

    def encode():
        builder = BatchBuilder(batch_size=16384)
        first = builder.append_many(run)
        return first, builder.build()

    c, py = run_both(encode)
    assert c == py
    assert c[1][0] == 148  # 100 B records with 1-2 byte deltas: 148 fill 16 KiB


@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.one_of(record_st, st.lists(record_st, max_size=4), st.just("build")),
                   min_size=1, max_size=30),
    batch_size=st.integers(61, 3000),
)
def test_append_record_encodes_byte_identical_batches(steps, batch_size):
    """Producer.send's path (append_record: one record written into the builder in place)
    mixed with append_many runs on the same builder, as a batch fed by send() and by the
    sidecar's send_batch() sees them, and builds between them (an append must drop the
    built bytes): same counts, sizes and bytes in C and in Python."""
    def encode():
        builder = BatchBuilder(batch_size=batch_size)
        answers = []
        for step in steps:
            try:
                if step == "build":
                    answers.append(builder.build())
                elif isinstance(step, tuple):
                    answers.append(records.append_record(builder, *step))
                else:
                    answers.append(("many", builder.append_many(step)))
            except Exception as exc:  # noqa: BLE001 - the same error from both is the point
                answers.append((type(exc), str(exc)))
        try:
            built = builder.build()
        except struct.error as exc:  # a first timestamp beyond int64: both fail the header
            built = ("struct.error", str(exc))
        return (answers, builder.uncompressed_size, builder.record_count,
                builder.last_offset_delta, builder.max_timestamp, built)

    c, py = run_both(encode)
    assert c == py


@needs_ext
def test_append_record_odd_inputs_take_the_python_path():
    """What the C append_record leaves to Python keeps Python's behaviour exactly, and a
    caller's bytearray among the parts is never written into."""
    key = bytearray(b"k")
    cases = [
        [(1, key, b"v", ()), (2, None, b"w", ())],  # the caller's bytearray, then C's record
        [(1, None, memoryview(b"v"), ())],
        [(1, None, b"v", [("h", bytearray(b"x"))])],
        [(1, None, b"v", ()), (2.5, None, b"v", ())],  # a float timestamp: does not fit
        [(2.5, None, b"v", ())],  # ... first in its batch: Python's TypeError
        [(1, None, b"v", ((b"not str", b"x"),))],
        [(2**64, None, b"v", ())],  # beyond int64
        [(1, None, b"v", ()), (-(2**63), None, b"v", ())],  # a delta beyond a varlong
    ]
    for case in cases:
        def encode(case=case):
            builder = BatchBuilder()
            out = []
            for rec in case:
                try:
                    out.append(records.append_record(builder, *rec))
                except Exception as exc:  # noqa: BLE001
                    out.append((type(exc), str(exc)))
            return out, builder.build() if builder.record_count else None

        c, py = run_both(encode)
        assert c == py, case
    assert key == bytearray(b"k")


@needs_ext
def test_append_record_fills_a_batch_as_append_many_does():
    run = [(1700000000000 + i, None, bytes(100), ()) for i in range(400)]

    def one_by_one():
        builder = BatchBuilder(batch_size=16384)
        counts = [records.append_record(builder, *rec) for rec in run[:150]]
        return counts, builder.build()

    c, py = run_both(one_by_one)
    assert c == py
    counts, built = c[1]
    assert counts == list(range(1, 149)) + [0, 0]  # 148 fill 16 KiB, as in append_many
    whole = BatchBuilder(batch_size=16384)
    whole.append_many(run)
    assert built == whole.build()


# -- decode ---------------------------------------------------------------------------------

decode_record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=200)),
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(header_st, max_size=3).map(tuple),
    st.integers(0, 2**41),
)


def _decoders(batch: bytes, min_offset: int):
    def run():
        _, recs = decode_records(batch)
        _, consumer = decode_consumer_records(batch, 0, ConsumerRecord, "t", 3, min_offset)
        columns: tuple[list, list, list, list, list] = ([], [], [], [], [])
        _, appended = decode_columns(batch, 0, min_offset, min_offset + 5, columns)
        buffers = ColumnBuffers()
        _, in_buffers = buffers.append_batch(batch, 0, min_offset, min_offset + 5)
        return (recs, [type(r) for r in recs], consumer, [type(r) for r in consumer], columns,
                appended, [bytes(b) for b in buffers.buffers], in_buffers)

    return run


@needs_ext
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(decode_record_st, max_size=20),
    base_offset=st.integers(0, 2**62),
    log_append=st.booleans(),
    codec=st.sampled_from([0, 1, 4]),
    skip=st.integers(0, 25),
)
def test_decoders_give_equal_objects(recs, base_offset, log_append, codec, skip):
    batch = build_batch(recs, base_offset=base_offset, codec=codec, timestamp_type=int(log_append))
    c, py = run_both(_decoders(batch, base_offset + skip))
    assert c == py
    assert c[0] == "ok"


def _with_payload(payload: bytes, count: int, base_offset: int = 0) -> bytes:
    """A batch around a raw (hostile) records section: header only, CRC not checked."""
    header = struct.pack(">qiibIhiqqqhii", base_offset, HEADER_SIZE - 12 + len(payload), -1, 2, 0,
                         0, 0, 1000, 1000, -1, -1, -1, count)
    return header + payload


def _decode_unchecked(batch: bytes, min_offset: int = 0):
    def run():
        _, recs = decode_records(batch, verify_crc=False)
        _, consumer = decode_consumer_records(batch, 0, ConsumerRecord, "t", 0, min_offset,
                                              verify_crc=False)
        # a list that already holds something: after an error it must hold just that
        columns: tuple[list, list, list, list, list] = (["kept"], [], [], [], [])
        _, appended = decode_columns(batch, 0, min_offset, 2**63, columns, verify_crc=False)
        return recs, consumer, columns, appended

    return run


def _buffers_unchecked(batch: bytes, min_offset: int = 0):
    def run():
        # buffers that already hold a record (a null key: bit 0 of the validity bytes
        # cleared): after an error they must hold just that, byte for byte
        buffers = ColumnBuffers()
        buffers.append_batch(build_batch([(None, b"v", (("h", None),), 5)]), 0, 0, 2**63)
        before = [bytes(b) for b in buffers.buffers]
        try:
            _, appended = buffers.append_batch(batch, 0, min_offset, 2**63, verify_crc=False)
        except Exception:
            assert [bytes(b) for b in buffers.buffers] == before
            raise
        return [bytes(b) for b in buffers.buffers], appended

    return run


@needs_ext
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=st.binary(max_size=80), count=st.integers(0, 6))
def test_hostile_bytes_give_the_same_error(payload, count):
    c, py = run_both(_decode_unchecked(_with_payload(payload, count)))
    assert c == py
    buffers_c, buffers_py = run_both(_buffers_unchecked(_with_payload(payload, count)))
    assert buffers_c == buffers_py
    # the column buffers fail exactly where the record decoders fail, with their error
    assert (buffers_c[0] == "ok") == (c[0] == "ok")
    if c[0] != "ok":
        assert buffers_c == c


@needs_ext
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    recs=st.lists(decode_record_st, min_size=1, max_size=5),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    cut=st.integers(0, 10**6),
    count_delta=st.integers(-1, 2),
)
def test_mutated_batches_give_the_same_outcome(recs, edits, cut, count_delta):
    """Valid batches with a few bytes of their records changed, cut short, or a wrong
    record count: the realistic corruptions (a varint's continuation bit, a length)."""
    batch = build_batch(recs)
    h = parse_header(batch)
    payload = bytearray(batch[HEADER_SIZE:])
    for where, byte in edits:
        payload[where % len(payload)] = byte
    payload = payload[: len(payload) - cut % 4] if cut % 3 == 0 else payload
    assume(h.records_count + count_delta >= 0)
    hostile = _with_payload(bytes(payload), h.records_count + count_delta)
    c, py = run_both(_decode_unchecked(hostile))
    assert c == py


def _record(body: bytes, length: int | None = None) -> bytes:
    """One record: its length varint (the body's own unless given) and the body."""
    return encode_zigzag(len(body) if length is None else length) + body


_NO_KEY_VALUE = b"\x00\x00\x00\x01\x01"  # attributes, tsd 0, od 0, null key, null value


@needs_ext
@pytest.mark.parametrize(
    "payload, count",
    [
        # a length varint of 10 bytes whose last byte overflows 64 bits
        (b"\xff" * 9 + b"\x7f", 1),
        # eleven continuation bytes: longer than a varlong
        (b"\xff" * 11, 1),
        # a header value of length 2**62: the position passes int64 before the check
        (_record(_NO_KEY_VALUE + b"\x02\x02a" + encode_zigzag(2**62), 13), 1),
        # a key of length 2**63 - 1
        (_record(b"\x00\x00\x00" + encode_zigzag(2**63 - 1) + bytes(20)), 1),
        # a negative record length, a negative key length
        (_record(_NO_KEY_VALUE + b"\x00", -5), 1),
        (_record(b"\x00\x00\x00\x03\x01\x00"), 1),
        # a huge record count over a short payload
        (_record(_NO_KEY_VALUE + b"\x00"), 2**31 - 1),
        # a header key that is not UTF-8, a header count below zero
        (_record(_NO_KEY_VALUE + b"\x02\x02\xff\x01"), 1),
        (_record(_NO_KEY_VALUE + b"\x03"), 1),
    ],
)
def test_edge_inputs_give_the_same_error(payload, count):
    c, py = run_both(_decode_unchecked(_with_payload(payload, count)))
    assert c == py
    assert c[0] is records.CorruptRecordError


@needs_ext
def test_offsets_beyond_int64_decode_as_python_ints():
    """baseOffset + offsetDelta can pass int64 in a hostile batch: Python ints, not a wrap."""
    payload = _record(b"\x00\x00" + encode_zigzag(2**63 - 1) + b"\x01\x01\x00")
    batch = _with_payload(payload, 1, base_offset=2**62)
    c, py = run_both(_decode_unchecked(batch))
    assert c == py
    assert c[0] == "ok" and c[1][0][0].offset == 2**62 + 2**63 - 1


# -- varints and murmur2 --------------------------------------------------------------------

@needs_ext
@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=14), pos=st.integers(0, 15))
def test_zigzag_decode_matches(data, pos):
    def outcome(fn):
        try:
            return fn(data, pos)
        except VarintError as exc:
            return ("VarintError", str(exc))

    assert outcome(_speedups.decode_zigzag) == outcome(decode_zigzag)


@needs_ext
@given(n=st.integers(-(2**64), 2**64))
def test_zigzag_encode_matches(n):
    try:
        expected = encode_zigzag(n)
    except OverflowError:
        with pytest.raises(OverflowError):
            _speedups.encode_zigzag(n)
        return
    assert _speedups.encode_zigzag(n) == expected


@needs_ext
@given(data=st.binary(max_size=40))
def test_murmur2_matches(data):
    assert _speedups.murmur2(data) == partitioners.murmur2_py(data)
    assert partitioners.murmur2(data) == partitioners.murmur2_py(data)


def test_header_namedtuple_is_unchanged():
    # decode_consumer_records builds ConsumerRecord without its __new__: the field order
    # it writes must be ConsumerRecord's
    assert ConsumerRecord._fields == ("topic", "partition", "offset", "timestamp",
                                      "timestamp_type", "key", "value", "headers")
    assert BatchHeader._fields[-1] == "records_count"


def test_this_process_runs_what_the_environment_says():
    """Run by the subset below (and by `make test-pure`) with DATABUS_PURE_PYTHON=1."""
    forced = os.environ.get("DATABUS_PURE_PYTHON", "") not in ("", "0")
    assert (records._native is None) == (forced or _speedups is None)
    assert (partitioners.murmur2 is partitioners.murmur2_py) == (records._native is None)


# The parts whose code paths change with the extension, run again on the pure-Python code.
# The whole suite twice would not fit the suite's time budget: `make test-pure` runs all of
# it on the fallback (docs/architecture.md).
PURE_SUBSET = [
    "tests/protocol/test_speedups.py::test_this_process_runs_what_the_environment_says",
    "tests/protocol/test_sidecar_speedups.py::test_this_process_runs_what_the_environment_says",
    "tests/plugins/test_json_speedups.py::test_this_process_runs_what_the_environment_says",
    "tests/sidecar/test_outbox_speedups.py::test_this_process_runs_what_the_environment_says",
    "tests/sidecar/test_router_speedups.py::test_this_process_runs_what_the_environment_says",
    "tests/sinks/test_index_fields.py",
    "tests/protocol/test_records.py",
    "tests/protocol/test_records_varint.py",
    "tests/client/test_partitioners.py",
    "tests/client/test_accumulator.py",
    "tests/client/test_delivery_future.py",
    "tests/client/test_fetcher.py",
    "tests/sidecar/test_session.py",
    "tests/sidecar/test_wire.py",
]


@needs_ext
def test_a_subset_of_the_suite_passes_on_the_pure_python_code():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, DATABUS_PURE_PYTHON="1")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *PURE_SUBSET],
        cwd=root, env=env, capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]
