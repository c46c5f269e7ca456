"""The sidecar wire format as pure data: golden bytes (the ones docs/sidecar-protocol.md
shows), byte-by-byte feeding, validation errors, and a hypothesis round trip."""

from __future__ import annotations

import itertools
import re
import struct
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.protocol import sidecar_wire as wire
from databus.protocol.sidecar_wire import ErrorCode, WireError

DOC = Path(__file__).resolve().parents[2] / "docs" / "sidecar-protocol.md"

GOLDEN_FRAMES = {
    "hello": wire.hello("databus-python/0.1.0"),
    "hello-reply": wire.hello_reply("databus/0.1.0", 16777216, 60000),
    "produce": wire.produce([
        wire.message_array(1, "orders", b'{"id":7}', b"c-42"),
        wire.message_array(2, "clicks", b"x", None, [("trace", b"\x01")]),
    ]),
    "reports": wire.reports([
        wire.report_ok(1, "orders", 3, 1041, 1700000000000),
        wire.report_error(2, 1000, "unknown stream 'clicks'"),
    ]),
    "group-reports": wire.reports([
        wire.report_group_ok([5, 6, 8], "orders", 1, 200, 1700000000000),
        wire.report_group_ok([7, 9], "orders", 2, 90, [1700000000001, 1700000000002]),
        wire.report_group_error([10, 11], 7, "timed out"),
    ]),
    "flush": wire.flush(3),
    "flushed": wire.flushed(3),
    "ping": wire.ping(4),
    "pong": wire.pong(4),
    "error": wire.error(1003, "frame too large"),
    "subscribe": wire.subscribe(1, "orders", "billing", ["paid"], 100),
    "subscribed": wire.subscribed(1, topic="orders", ordering="partition"),
    "subscribed-error": wire.subscribed(2, 1008, "group 'billing' already consumes 'clicks'"),
    "fetch": wire.fetch(1, 100, 500, 1),
    "messages": wire.messages(1, [
        wire.consumed_array(1, 3, 1041, 1700000000000, 1, b'{"id":7}', b"c-42"),
        wire.consumed_array(2, 3, 1042, 1700000000001, 2, b"x", None,
                            [["databus-tag", b"paid"]]),
    ]),
    "ack": wire.ack(1, [1, 2]),
    "ack-ranges": wire.ack(1, [5002], [[1, 5000]]),
    "nack": wire.nack(1, [[3, 5000, "db down"], [4, None, None]]),
    "unsubscribe": wire.unsubscribe(1),
    "unsubscribed": wire.unsubscribed(1),
}


def doc_goldens() -> dict[str, bytes]:
    text = DOC.read_text()
    blocks = re.findall(r"<!-- golden:(\S+) -->\n```text\n(.*?)```", text, re.S)
    return {name: bytes.fromhex(" ".join(body.split())) for name, body in blocks}


def test_documented_examples_are_exactly_what_the_codec_writes():
    documented = doc_goldens()
    assert set(documented) == set(GOLDEN_FRAMES)
    for name, frame in GOLDEN_FRAMES.items():
        assert wire.encode_frame(frame) == documented[name], name


def test_hello_golden_bytes_spelled_out():
    # The prefix is the body length, big-endian; the body a 3-entry fixmap.
    data = wire.encode_frame(wire.hello("x"))
    assert data == (
        b"\x00\x00\x00\x1e"
        b"\x83\xa4type\xa5hello\xa7version\x03\xa6client\xa1x"
    )


@pytest.mark.parametrize("name", sorted(GOLDEN_FRAMES))
def test_documented_examples_decode_byte_by_byte(name):
    data = doc_goldens()[name]
    decoder = wire.FrameDecoder()
    frames = []
    for i in range(len(data)):
        frames += decoder.feed(data[i : i + 1])
    assert frames == [msgpack.unpackb(msgpack.packb(GOLDEN_FRAMES[name]), raw=False)]
    assert decoder.buffered == 0


def test_many_frames_in_one_read_and_a_split_tail():
    data = b"".join(wire.encode_frame(wire.ping(i)) for i in range(5))
    decoder = wire.FrameDecoder()
    assert [f["id"] for f in decoder.feed(data + data[:7])] == [0, 1, 2, 3, 4]
    assert decoder.buffered == 7
    assert decoder.feed(data[7:19]) == [wire.ping(0)]


def test_oversized_prefix_is_refused_before_the_body_arrives():
    decoder = wire.FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(WireError) as info:
        decoder.feed(struct.pack(">I", 0xFFFFFFF0))
    assert info.value.code == ErrorCode.FRAME_TOO_LARGE
    assert "1024" in str(info.value)


@pytest.mark.parametrize(
    "body, fragment",
    [
        (b"\xc1", "invalid msgpack"),  # 0xc1 is never used
        (msgpack.packb([1, 2]), "must be a msgpack map"),
        (msgpack.packb({"kind": "hello"}), "string 'type'"),
        (msgpack.packb({"type": 7}), "string 'type'"),
        (msgpack.packb({"type": "x"}) + b"\x00", "invalid msgpack"),  # trailing bytes
        (msgpack.packb({"type": msgpack.ExtType(5, b"x")}), "extension type 5"),
        (b"\x81\xa4type\xa3\xff\xfe\xfd", "invalid msgpack"),  # invalid UTF-8 str
    ],
)
def test_malformed_bodies(body, fragment):
    with pytest.raises(WireError) as info:
        wire.FrameDecoder().feed(struct.pack(">I", len(body)) + body)
    assert info.value.code == ErrorCode.MALFORMED_FRAME
    assert fragment in str(info.value)


def test_hello_checks():
    assert wire.check_hello(wire.hello("x")) == wire.PROTOCOL_VERSION == 3
    assert wire.check_hello(wire.hello("x", version=2)) == 2
    assert wire.check_hello(wire.hello("x", version=1)) == 1
    with pytest.raises(WireError) as info:
        wire.check_hello(wire.ping(1))
    assert info.value.code == ErrorCode.HELLO_REQUIRED
    with pytest.raises(WireError) as info:
        wire.check_hello(wire.hello("x", version=4))
    assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert "supported: [1, 2, 3]" in str(info.value)
    assert wire.hello_reply("s", 1, 2, version=1)["version"] == 1


def test_parse_messages_fills_optional_fields():
    frame = wire.produce([
        [1, "s", b"v"],
        [2, "s", None, b"k", [["h", b"1"], ["n", None]], 3, 1700000000000],
    ])
    first, second = wire.parse_messages(frame)
    assert first == wire.Message(1, "s", b"v", None, None, None, None)
    assert second == wire.Message(2, "s", None, b"k", [("h", b"1"), ("n", None)], 3, 1700000000000)


@pytest.mark.parametrize(
    "message, fragment",
    [
        ([1, "s"], "3 to 7 fields"),
        ([1, "s", b"v", None, None, None, None, None], "3 to 7 fields"),
        ([-1, "s", b"v"], "id must be"),
        ([1, b"s", b"v"], "stream must be a string"),
        ([1, "s", "text"], "value must be bin"),
        ([1, "s", b"v", "k"], "key must be bin"),
        ([1, "s", b"v", None, [["h"]]], "headers must be"),
        ([1, "s", b"v", None, [[b"h", b"v"]]], "headers must be"),
        ([1, "s", b"v", None, None, -2], "partition must be"),
        ([1, "s", b"v", None, None, None, 1.5], "timestamp must be"),
        ("not an array", "3 to 7 fields"),
    ],
)
def test_parse_messages_rejects(message, fragment):
    with pytest.raises(WireError) as info:
        wire.parse_messages(wire.produce([[0, "ok", b""], message]))
    assert info.value.code == ErrorCode.MALFORMED_FRAME
    assert "message 1" in str(info.value) and fragment in str(info.value)


def test_parse_produce_counts_payload_bytes_in_the_same_pass():
    frame = wire.produce([
        [1, "s", b"12345"],
        [2, "s", None, b"key"],
        [3, "s", b"v", None, [["hdr", b"xy"], ["n", None]]],
    ])
    messages, sizes = wire.parse_produce(frame)
    assert messages == wire.parse_messages(frame)
    assert sizes == [5, 3, 1 + 3 + 2 + 1]


def test_messages_must_be_an_array():
    with pytest.raises(WireError):
        wire.parse_messages({"type": "produce", "messages": {"a": 1}})


def test_report_round_trip():
    assert wire.parse_report(wire.report_ok(5, "t", 1, 2, 3)) == wire.Report(5, 0, "t", 1, 2, 3)
    report = wire.parse_report(wire.report_error(6, 1001, "full"))
    assert (report.id, report.code, report.message) == (6, 1001, "full")


def test_group_reports_mean_one_report_per_id_at_consecutive_offsets():
    shared = wire.report_group_ok([5, 6, 8], "orders", 1, 200, 1700)
    assert wire.expand_report(shared) == [
        [5, 0, "orders", 1, 200, 1700], [6, 0, "orders", 1, 201, 1700],
        [8, 0, "orders", 1, 202, 1700],
    ]
    own = wire.report_group_ok([7, 9], "t", 0, 90, [11, 12])
    assert wire.parse_reports(own) == [
        wire.Report(7, 0, "t", 0, 90, 11), wire.Report(9, 0, "t", 0, 91, 12)
    ]
    acks0 = wire.report_group_ok([1, 2], "t", 0, -1, 5)
    assert [r.offset for r in wire.parse_reports(acks0)] == [-1, -1]
    failed = wire.parse_reports(wire.report_group_error([3, 4], 7, "timed out"))
    assert [(r.id, r.code, r.message) for r in failed] == [(3, 7, "timed out"), (4, 7, "timed out")]
    single = wire.report_ok(5, "t", 1, 2, 3)
    assert wire.expand_report(single) == [single]
    assert wire.parse_reports(single) == [wire.Report(5, 0, "t", 1, 2, 3)]


@pytest.mark.parametrize(
    "item", [[["x"], 0, "t", 0, 1, 2], [[1, 2], 0, "t", 0, 1, [2]], [[1], 0, "t"]]
)
def test_bad_group_reports_are_rejected(item):
    with pytest.raises(WireError):
        wire.parse_reports(item)


def test_error_names_cover_kafka_and_sidecar_codes():
    assert wire.error_name(1000) == "UNKNOWN_STREAM"
    assert wire.error_name(10) == "MESSAGE_TOO_LARGE"
    assert wire.error_name(6) == "NOT_LEADER_OR_FOLLOWER"  # from Kafka's table
    assert wire.error_name(99999) == "UNKNOWN_99999"


payload = st.one_of(st.none(), st.binary(max_size=64))
messages = st.lists(
    st.builds(
        wire.Message,
        id=st.integers(0, 2**64 - 1),
        stream=st.text(max_size=20),
        value=payload,
        key=payload,
        headers=st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), payload), max_size=3)),
        partition=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
        timestamp=st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(messages, st.integers(1, 64))
def test_produce_round_trip_in_arbitrary_chunks(msgs, chunk):
    data = wire.encode_frame(wire.produce([wire.message_array(*m) for m in msgs]))
    decoder = wire.FrameDecoder()
    frames = []
    for i in range(0, len(data), chunk):
        frames += decoder.feed(data[i : i + chunk])
    assert len(frames) == 1
    assert wire.parse_messages(frames[0]) == msgs


def test_a_16_mib_frame_in_4_kib_reads_is_copied_once_not_once_per_read():
    # The splitter is linear: each byte of a frame cut by reads is copied into its buffer
    # once.  (Concatenating the buffer with every read, as it once did, copies
    # ~ size**2 / (2 * read) bytes: 32 GiB here.)
    value = bytes(range(256)) * (wire.DEFAULT_MAX_FRAME_BYTES // 256 - 1)
    data = wire.encode_frame(wire.produce([[1, "s", value]]))
    assert len(data) > 16 * 1024 * 1024 - 512
    decoder = wire.FrameDecoder()
    frames = []
    for i in range(0, len(data), 4096):
        frames += decoder.feed(data[i : i + 4096])
    assert len(frames) == 1 and frames[0]["messages"][0][2] == value
    assert decoder.copied_bytes == len(data)
    assert decoder.buffered == 0


def test_frames_whole_in_a_read_are_not_copied():
    data = b"".join(wire.encode_frame(wire.ping(i)) for i in range(100))
    decoder = wire.FrameDecoder()
    assert [f["id"] for f in decoder.feed(data)] == list(range(100))
    assert decoder.copied_bytes == 0
    # A frame cut by the read boundary: only its bytes are copied.
    one = wire.encode_frame(wire.ping(7))
    assert decoder.feed(data + one[:5]) == [wire.ping(i) for i in range(100)]
    assert decoder.feed(one[5:] + one) == [wire.ping(7), wire.ping(7)]
    assert decoder.copied_bytes == len(one)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    st.lists(st.integers(0, 4000), max_size=10),
)
def test_frames_cut_anywhere_split_the_same_and_each_byte_is_copied_at_most_once(values, cuts):
    frames = [wire.produce([[i, "s", v]]) for i, v in enumerate(values)]
    data = b"".join(wire.encode_frame(f) for f in frames)
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    decoder = wire.FrameDecoder()
    out = []
    for start, end in itertools.pairwise(bounds):
        out += decoder.feed(data[start:end])
    assert out == frames
    assert decoder.copied_bytes <= len(data)
    assert decoder.buffered == 0


def test_next_frame_leaves_the_rest_for_later():
    data = b"".join(wire.encode_frame(wire.ping(i)) for i in range(3))
    decoder = wire.FrameDecoder()
    decoder.receive(data)
    assert decoder.next_frame() == wire.ping(0)
    assert decoder.buffered == len(data) * 2 // 3
    # More bytes before the rest was read: nothing is lost, order is kept.
    assert decoder.feed(wire.encode_frame(wire.ping(3))) == [wire.ping(i) for i in (1, 2, 3)]


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(1, 200)))
def test_ack_runs_split_ids_into_singles_and_maximal_runs(ids):
    singles, runs = wire.ack_runs(list(ids))
    covered = list(singles) + [i for first, last in runs for i in range(first, last + 1)]
    assert sorted(covered) == sorted(ids)  # every id once, nothing else
    assert all(last > first for first, last in runs)
    # maximal: no two pieces touch (else they would be one run)
    edges = sorted([(i, i) for i in singles] + [tuple(r) for r in runs])
    assert all(b[0] > a[1] + 1 for a, b in itertools.pairwise(edges))


def test_acks_in_order_are_one_range():
    assert wire.ack_runs(list(range(7, 5007))) == ([], [[7, 5006]])
    assert wire.ack_runs([4]) == ([4], [])


@pytest.mark.parametrize("ranges", [
    [[5, 4]], [[-1, 3]], [[1]], [[1, 2, 3]], "x", [["1", 2]], [[1.0, 2]],
])
def test_a_malformed_ack_range_is_refused(ranges):
    with pytest.raises(wire.WireError, match="ack"):
        wire.parse_ack({"type": "ack", "id": 1, "ranges": ranges})


def test_an_ack_of_ranges_alone_parses():
    assert wire.parse_ack({"type": "ack", "id": 1, "ranges": [[1, 5000]]}) == (1, [], [(1, 5000)])
    assert wire.parse_ack(wire.ack(2, [9])) == (2, [9], [])
