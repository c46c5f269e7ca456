"""The sidecar wire format's C kernel (databus.protocol._sidecar_speedups) against Python.

``parse_produce(body)`` either returns exactly what msgpack's decode plus
``sidecar_wire.parse_produce`` return for that body, or None (the Python code then decides,
errors included).  Checked here with hypothesis on well-formed frames of every shape the
protocol allows, on frames the protocol refuses, and on random and mutated bytes (the C
code must never crash on them, nor accept what Python refuses).  ``decode_body_or_produce``
(what the sidecar's session runs) gives the same result or the same error either way.
"""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from databus.client.fetcher import ConsumerRecord
from databus.protocol import sidecar_wire as wire
from databus.protocol import speedups
from databus.protocol.sidecar_wire import WireError
from databus.sidecar.consume.core import Entry
from tests.helpers.blocked_import import python_without

try:
    from databus.protocol import _sidecar_speedups
except ImportError:  # reported by test_speedups.test_the_extension_is_built_where_a_compiler_is
    _sidecar_speedups = None

needs_ext = pytest.mark.skipif(
    _sidecar_speedups is None, reason="the C extension is not built here (no C compiler at install)"
)

_pack = msgpack.Packer(use_bin_type=True).pack


def python_outcome(body: bytes):
    """The pure-Python reading of a body: ("produce", result), ("other", type) or the error."""
    try:
        frame = wire.decode_body(body)
        if frame["type"] != "produce":
            return ("other", frame["type"])
        return ("produce", wire.parse_produce(frame))
    except WireError as exc:
        return (WireError, exc.code, str(exc))


def check(body: bytes) -> None:
    c = _sidecar_speedups.parse_produce(body)
    py = python_outcome(body)
    if c is not None:
        assert py == ("produce", c)
        # equal is not enough: the same types too (bytes, not bytearray; tuples, lists)
        assert repr(py[1]) == repr(c)


def both_paths(body: bytes, monkeypatch):
    """decode_body_or_produce with the C kernel and without it: its value, or the error."""
    outcomes = []
    for impl in (_sidecar_speedups.parse_produce, None):
        monkeypatch.setattr(wire, "_parse_produce_c", impl)
        try:
            outcomes.append(("ok", repr(wire.decode_body_or_produce(body))))
        except WireError as exc:
            outcomes.append((exc.code, str(exc)))
    return outcomes


# Every field of every message form the protocol allows, plus wrong types at each place.
ints = st.one_of(st.integers(0, 127), st.integers(0, 2**64 - 1), st.integers(-(2**63), -1))
payload = st.one_of(st.none(), st.binary(max_size=40))
header = st.tuples(st.text(max_size=5), payload).map(list)
good_message = st.tuples(
    st.integers(0, 2**64 - 1),
    st.sampled_from(["s", "orders", "ünïcode", ""]) | st.text(max_size=4),
    payload,
    payload,
    st.one_of(st.none(), st.lists(header, max_size=3)),
    st.one_of(st.none(), st.integers(0, 2**31)),
    st.one_of(st.none(), st.integers(-(2**63), 2**64 - 1)),
    st.integers(3, 7),
).map(lambda t: list(t[:t[7]]))
odd_value = st.one_of(
    ints, st.booleans(), st.floats(allow_nan=False), st.text(max_size=3), st.binary(max_size=3),
    st.none(), st.lists(st.integers(0, 3), max_size=2),
    st.lists(st.lists(st.text(max_size=2), max_size=3), max_size=2),
)


@st.composite
def message(draw):
    fields = draw(good_message)
    if draw(st.integers(0, 4)) == 0:  # one field of the wrong type, or a wrong length
        if draw(st.booleans()) and fields:
            fields[draw(st.integers(0, len(fields) - 1))] = draw(odd_value)
        else:
            fields = fields + [draw(odd_value)] * draw(st.integers(1, 3))
    return fields


@st.composite
def frame(draw):
    messages = draw(st.lists(message(), max_size=6))
    shape = draw(st.integers(0, 6))
    if shape == 0:
        return {"messages": messages, "type": "produce"}  # the other key order
    if shape == 1:
        return {"type": "produce", "messages": messages, "extra": 1}
    if shape == 2:
        return {"type": draw(st.sampled_from(["flush", "ping", "produc", ""])), "messages": messages}
    if shape == 3:
        return {"type": "produce", "messages": draw(odd_value)}
    return {"type": "produce", "messages": messages}


@needs_ext
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame())
def test_c_gives_the_python_result_or_leaves_the_frame_to_python(f):
    check(_pack(f))


@needs_ext
@settings(max_examples=100, deadline=None)
@given(st.lists(good_message, max_size=20))
def test_the_sdk_shapes_are_read_in_c(messages):
    """The frames an SDK sends are the C kernel's to read (else it would gain nothing)."""
    body = _pack(wire.produce(messages))
    c = _sidecar_speedups.parse_produce(body)
    assert c is not None
    assert repr(c) == repr(wire.parse_produce(wire.decode_body(body)))


@st.composite
def mutated(draw):
    body = bytearray(_pack(draw(frame())))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 3))
        at = draw(st.integers(0, len(body)))
        if kind == 0 and at < len(body):
            body[at] = draw(st.integers(0, 255))
        elif kind == 1:
            body[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif kind == 2:
            del body[at : at + draw(st.integers(1, 4))]
        else:
            body = body[:at]
    return bytes(body)


@needs_ext
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(), st.binary(max_size=64)))
def test_hostile_bytes_never_pass_what_python_refuses(body):
    check(body)


@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(mutated(), frame().map(_pack)))
def test_the_sessions_decoder_gives_the_same_result_or_error_either_way(body):
    with pytest.MonkeyPatch.context() as monkeypatch:
        c, py = both_paths(body, monkeypatch)
    assert c == py


@needs_ext
def test_edge_bodies():
    produce = b"\x82\xa4type\xa7produce\xa8messages"
    cases = [
        b"",
        b"\x82",
        produce + b"\x90",  # no messages
        produce + b"\x90\x00",  # a byte after the map: msgpack's ExtraData in Python
        produce + b"\xdd\xff\xff\xff\xff",  # a hostile message count
        produce + b"\x91\x93\x01\xa1s\xc4\x05ab",  # a value cut short
        produce + b"\x91\x93\x01\xa2\xff\xfe\xc0",  # a stream of invalid UTF-8
        produce + b"\x91\x95\x01\xa1s\xc0\xc0\xdc\xff\xff",  # a hostile header count
        produce + b"\x91\x93\xff\xa1s\xc0",  # a negative id
        produce + b"\x91\x93\xc3\xa1s\xc0",  # true as the id
        produce + b"\x91\x93\x01\xa1s\xa1v",  # a str value
        produce + b"\x91\x96\x01\xa1s\xc0\xc0\xc0\xd0\xff",  # partition -1 as int8
        produce + b"\x91\x97\x01\xa1s\xc0\xc0\xc0\xc0\xcb" + bytes(8),  # a float timestamp
    ]
    for body in cases:
        check(body)
    assert _sidecar_speedups.parse_produce(produce + b"\x90") == ([], [])
    assert _sidecar_speedups.parse_produce(produce + b"\x90\x00") is None
    # ids and timestamps as any msgpack integer form, a stream object shared by a run
    body = produce + (b"\x92\x97\xd3" + (5).to_bytes(8, "big") + b"\xd9\x01s\xc4\x01v\xc0"
                      b"\x91\x92\xa1h\xc0\xc0\xd3" + (-5).to_bytes(8, "big", signed=True)
                      + b"\x93\xcf" + (2**64 - 1).to_bytes(8, "big") + b"\xa1s\xc0")
    messages, sizes = _sidecar_speedups.parse_produce(body)
    check(body)
    assert messages == [(5, "s", b"v", None, [("h", None)], None, -5),
                        (2**64 - 1, "s", None, None, None, None, None)]
    assert sizes == [2, 0]
    assert messages[0][1] is messages[1][1]


def test_this_process_runs_what_the_environment_says():
    """Also run on the pure-Python code (test_speedups.py's subset)."""
    expected = speedups.load_native(name="_sidecar_speedups")
    assert (wire._parse_produce_c is None) == (expected is None)
    assert (wire._encode_produce_c is None) == (expected is None)
    assert (wire._encode_reports_c is None) == (expected is None)


# -- the SDK's produce frames -----------------------------------------------------------------

queued_message = st.one_of(
    # the forms send() queues: [id, stream, value(, key)] and the full seven fields
    st.tuples(st.integers(1, 2**64 - 1), st.text(max_size=6), payload),
    st.tuples(st.integers(1, 2**64 - 1), st.text(max_size=6), payload, payload),
    st.tuples(st.integers(1, 2**64 - 1), st.text(max_size=6), payload, payload,
              st.one_of(st.none(), st.lists(header, max_size=3)),
              st.one_of(st.none(), st.integers(0, 2**31)),
              st.one_of(st.none(), st.integers(-(2**63), 2**64 - 1))),
    # what the C encoder leaves to msgpack: a bool, a float, an int beyond 64 bits
    st.tuples(st.integers(1, 9), st.text(max_size=2), payload, payload, st.none(), st.none(),
              st.one_of(st.booleans(), st.floats(allow_nan=False), st.just(2**64))),
)


def encode_both(queue, start, end, max_messages, limit, monkeypatch):
    outcomes = []
    for impl in (_sidecar_speedups.encode_produce, None):
        monkeypatch.setattr(wire, "_encode_produce_c", impl)
        out = bytearray(b"before")
        try:
            n = wire.append_produce(out, queue, start, end, max_messages, limit)
            outcomes.append((n, bytes(out)))
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            outcomes.append((type(exc), str(exc), bytes(out)))
    return outcomes


@needs_ext
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(queue=st.lists(queued_message, max_size=25), max_messages=st.integers(1, 8),
       limit=st.one_of(st.just(-1), st.integers(0, 400)), data=st.data())
def test_produce_frames_are_byte_identical(queue, max_messages, limit, data):
    start = data.draw(st.integers(0, len(queue)))
    end = data.draw(st.integers(start, len(queue)))
    with pytest.MonkeyPatch.context() as monkeypatch:
        c, py = encode_both(queue, start, end, max_messages, limit, monkeypatch)
    assert c == py
    if not isinstance(c[0], type):  # and they decode to the messages, in order
        frames = wire.FrameDecoder().feed(c[1][len(b"before"):])
        assert [m for f in frames for m in f["messages"]] == (
            msgpack.unpackb(_pack(queue[start:end])))


@needs_ext
def test_the_sdk_queue_is_encoded_in_c(monkeypatch):
    """send()'s tuples (str, bytes, ints) never take the msgpack path."""
    queue = [(1, "s", b"v"), (2, "s", None, b"k"), (3, "s", b"v", None, [["h", b"x"]], 1, 5)]
    expected = (wire.encode_frame(wire.produce(queue[:2]))
                + wire.encode_frame(wire.produce(queue[2:])))
    assert _sidecar_speedups.encode_produce(queue, 0, 3, 2, -1, wire.MESSAGE_OVERHEAD) == expected
    # the same frames appended to a bytearray (the SDK's output buffer), growing it many
    # times over, or nothing appended when a message holds what the C code does not pack
    out = bytearray(b"sent already")
    del out[:5]  # a bytearray whose data does not start at its allocation's start
    frame = wire.encode_frame(wire.produce(queue))
    big = queue * 3000
    n = _sidecar_speedups.encode_produce(big, 0, len(big), 3, -1, wire.MESSAGE_OVERHEAD, out)
    assert bytes(out) == b"already" + frame * 3000 and n == len(frame) * 3000
    assert _sidecar_speedups.encode_produce([(1, "s", 0.5)], 0, 1, 2, -1, 64, out) is None
    assert bytes(out) == b"already" + frame * 3000
    with pytest.raises(TypeError, match="bytearray"):
        _sidecar_speedups.encode_produce(queue, 0, 3, 2, -1, 64, memoryview(out))


# -- the sidecar's reports frames -------------------------------------------------------------

msg_id = st.integers(1, 2**64 - 1)
offset = st.one_of(st.just(-1), st.integers(0, 2**63 - 1))
timestamp = st.integers(-(2**63), 2**63 - 1)
report_item = st.one_of(
    # the forms the sidecar sends: single, group (one timestamp or one per id), errors
    st.builds(wire.report_ok, msg_id, st.text(max_size=40), st.integers(0, 2**31 - 1), offset,
              timestamp),
    st.builds(wire.report_error, msg_id, st.sampled_from(list(wire.ErrorCode)), st.text()),
    st.lists(msg_id, max_size=20).flatmap(lambda ids: st.builds(
        wire.report_group_ok, st.just(ids), st.text(max_size=300), st.integers(0, 2**31 - 1),
        offset, st.one_of(timestamp, st.lists(timestamp, min_size=len(ids),
                                              max_size=len(ids))))),
    st.builds(wire.report_group_error, st.lists(msg_id, max_size=20),
              st.sampled_from(list(wire.ErrorCode)), st.text()),
    # what the C encoder leaves to msgpack: a float, a bool, an int beyond 64 bits, a dict
    st.tuples(msg_id, st.one_of(st.floats(allow_nan=False), st.booleans(), st.just(2**64),
                                st.just(-(2**63) - 1), st.just({"a": 1}))).map(list),
)


def encode_reports_both(items, monkeypatch):
    outcomes = []
    for impl in (_sidecar_speedups.encode_reports, None):
        monkeypatch.setattr(wire, "_encode_reports_c", impl)
        try:
            outcomes.append(wire.encode_reports(items))
        except Exception as exc:  # noqa: BLE001 - the comparison is the point
            outcomes.append((type(exc), str(exc)))
    return outcomes


@needs_ext
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(report_item, max_size=12))
def test_reports_frames_are_byte_identical(items):
    with pytest.MonkeyPatch.context() as monkeypatch:
        c, py = encode_reports_both(items, monkeypatch)
    assert c == py


@needs_ext
def test_the_sidecars_reports_are_encoded_in_c():
    """What the session queues (ints, str, lists of them) never takes the msgpack path, big
    groups included (array 16 and 32 headers); the rest is left to it."""
    items = [wire.report_ok(1, "t", 0, 5, 7),
             wire.report_group_ok(list(range(2, 70_000)), "x" * 40, 3, 10, 2**40),
             wire.report_group_error([9, 2**64 - 1], wire.ErrorCode.MALFORMED_FRAME, "bad é")]
    for shape in ([], items[:1], items):
        assert _sidecar_speedups.encode_reports(shape) == wire.encode_frame(wire.reports(shape))
    assert _sidecar_speedups.encode_reports([[1, 0.5]]) is None
    assert _sidecar_speedups.encode_reports(([1, 0, "t", 0, 5, 7],)) is None  # not a list


def test_a_process_without_the_extension_runs_the_python_twins():
    """As a machine without a C compiler meets it: the module cannot be imported (blocked
    here by a meta-path finder), and the wire format runs in Python."""
    out = python_without("databus.protocol._sidecar_speedups", (
        "from databus.protocol import sidecar_wire as wire\n"
        "assert wire._parse_produce_c is None and wire._encode_produce_c is None\n"
        "out = bytearray()\n"
        "wire.append_produce(out, [(1, 's', b'v')], 0, 1, 10)\n"
        "print(wire.decode_body_or_produce(bytes(out[4:])))\n"
    ))
    assert out.strip() == "([(1, 's', b'v', None, None, None, None)], [1])"


# --- messages frames (sidecar -> app), packed from consume/core.py's entries ---------------

_header = st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=12))
_record = st.builds(
    ConsumerRecord, topic=st.just("t"), partition=st.integers(0, 2**31 - 1),
    offset=st.integers(0, 2**63 - 1), timestamp=st.integers(-1, 2**63 - 1),
    timestamp_type=st.just(0), key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=300),
    headers=st.lists(_header, max_size=4).map(tuple),
)


@st.composite
def _entries(draw):
    out = []
    for i, rec in enumerate(draw(st.lists(_record, max_size=20))):
        entry = Entry(("t", rec.partition), rec.offset, rec, draw(st.integers(1, 2**31)))
        entry.delivery_id = draw(st.integers(1, 2**63 - 1)) if i % 3 else i + 1
        out.append(entry)
    return out


@needs_ext
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), _entries())
def test_messages_frames_are_byte_identical(sub_id, entries):
    """The C packer writes what msgpack writes for the documented arrays (Entry.wire()), and
    the app reads back exactly those arrays."""
    c = _sidecar_speedups.encode_messages(sub_id, entries)
    assert c is not None
    assert c == wire.encode_messages_py(sub_id, entries)
    assert c == wire.encode_frame(wire.messages(sub_id, [e.wire() for e in entries]))
    (frame,) = wire.FrameDecoder().feed(c)
    assert frame["messages"] == [e.wire() for e in entries]


@needs_ext
def test_a_messages_frame_with_what_c_does_not_pack_falls_back_to_python():
    rec = ConsumerRecord("t", 0, 5, 7, 0, None, b"v", ())
    entry = Entry(("t", 0), 5, rec, 1)
    entry.delivery_id = 3
    odd = Entry(("t", 0), 6, rec._replace(value=bytearray(b"v")), 1)  # not bytes
    odd.delivery_id = 4
    assert _sidecar_speedups.encode_messages(1, [entry, odd]) is None
    assert wire.encode_messages(1, [entry, odd]) == wire.encode_frame(
        wire.messages(1, [entry.wire(), odd.wire()]))
    # a broken entry is an error, not a frame with a hole in it
    with pytest.raises(AttributeError):
        _sidecar_speedups.encode_messages(1, [entry, object()])
